// SPDX-License-Identifier: (Apache-2.0 OR MIT) AND GPL-2.0-only
// linerate's XDP live-frames generator program (`linerate gen --engine live`), run by
// BPF_PROG_RUN with BPF_F_TEST_XDP_LIVE_FRAMES: the kernel hands it frames initialised from the
// template, and every frame it returns XDP_TX for is transmitted on the device given by the
// run's ingress_ifindex. Frames are recycled from a page pool and keep their bytes between
// runs, so the varied fields are rewritten from whatever value the frame holds, with
// incremental checksum updates (RFC 1624) computed from that old value.
//
// The per-CPU map `gen_map` holds the configuration (written by the loader for every CPU) and
// each CPU's running state (increment position, random state, packet count). One inlined
// per-CPU lookup per packet, no helper call. With nothing to vary the program only counts.
//
// Rebuild with bpf/build.sh; checked against this source by crates/linerate/tests/xdp_object.rs.
// No global data and no BPF-to-BPF calls (the loader in port/xdp/obj.rs refuses them).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

// One varied field: value = lo + position, position in 0..span.
struct lr_vary {
	__u64 span;   // number of values (1..2^32)
	__u32 lo;     // first value (host order)
	__u32 cur;    // next position (increment)
	__u16 off;    // byte offset of the field in the frame
	__u8 width;   // 4 (address) or 2 (port)
	__u8 mode;    // 0 fixed (not varied), 1 increment, 2 random
	__u8 l3;      // the field is in the IPv4 header checksum
	__u8 pad[3];
};

struct lr_gen {
	__u64 pkts;         // frames this CPU returned XDP_TX for
	__u32 rng;          // xorshift32 state (non-zero)
	__u16 l3_csum;      // offset of the IPv4 header checksum (0: none, IPv6)
	__u16 l4_csum;      // offset of the UDP/TCP checksum
	__u8 nvary;         // fields in use (0..4)
	__u8 udp;           // a transport checksum of 0 is sent as 0xffff
	__u8 pad[6];
	struct lr_vary f[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lr_gen);
} gen_map SEC(".maps");

static __always_inline __u32 fold(__u32 s)
{
	s = (s & 0xffff) + (s >> 16);
	return (s & 0xffff) + (s >> 16);
}

// Ones' complement sum of the two 16-bit halves of a 32-bit word as they lie in memory.
static __always_inline __u32 halves(__u32 w)
{
	return (w & 0xffff) + (w >> 16);
}

SEC("xdp")
int lr_gen(struct xdp_md *ctx)
{
	__u32 key = 0;
	struct lr_gen *g = bpf_map_lookup_elem(&gen_map, &key);
	if (!g)
		return XDP_ABORTED;
	g->pkts++;
	__u8 n = g->nvary;
	if (!n)
		return XDP_TX;

	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	// Differences of the checksummed words, old -> new, as ones' complement sums.
	__u32 d3 = 0, d4 = 0;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		if (i >= n)
			break;
		struct lr_vary *f = &g->f[i];
		__u32 v;
		if (f->mode == 2) {
			__u32 x = g->rng;
			x ^= x << 13;
			x ^= x >> 17;
			x ^= x << 5;
			g->rng = x;
			v = f->lo + (__u32)(((__u64)x * f->span) >> 32);
		} else {
			v = f->lo + f->cur;
			if ((__u64)(f->cur + 1) >= f->span)
				f->cur = 0;
			else
				f->cur++;
		}
		__u32 off = f->off & 0x1ff;
		if (f->width == 4) {
			__u32 *p = data + off;
			if ((void *)(p + 1) > end)
				return XDP_ABORTED;
			__u32 old = *p;
			__u32 nw = __builtin_bswap32(v);
			*p = nw;
			__u32 d = halves(~old) + halves(nw);
			d4 += d;
			if (f->l3)
				d3 += d;
		} else {
			__u16 *p = data + off;
			if ((void *)(p + 1) > end)
				return XDP_ABORTED;
			__u16 old = *p;
			__u16 nw = __builtin_bswap16((__u16)v);
			*p = nw;
			d4 += (__u16)~old + nw;
		}
	}
	__u32 o4 = g->l4_csum & 0x1ff;
	__u16 *c4 = data + o4;
	if ((void *)(c4 + 1) > end)
		return XDP_ABORTED;
	__u16 c = ~fold((__u16)~*c4 + fold(d4));
	if (!c && g->udp)
		c = 0xffff;
	*c4 = c;
	__u32 o3 = g->l3_csum & 0x1ff;
	if (o3) {
		__u16 *c3 = data + o3;
		if ((void *)(c3 + 1) > end)
			return XDP_ABORTED;
		*c3 = ~fold((__u16)~*c3 + fold(d3));
	}
	return XDP_TX;
}

char _license[] SEC("license") = "Dual MIT/GPL";
