// SPDX-License-Identifier: (Apache-2.0 OR MIT) AND GPL-2.0-only
// linerate's XDP program with receive metadata: as xdp_redirect.c, packets of a receive queue
// with an AF_XDP socket in `xsks_map` go to that socket and everything else continues up the
// stack (XDP_PASS, untouched). Before a packet goes to a socket the program
//  - puts back the VLAN tag the NIC (or veth, for a frame whose tag travels in its metadata)
//    took out of it, so the socket gets the frame as it was on the wire
//    (bpf_xdp_metadata_rx_vlan_tag, kernel 6.8+, drivers that offer it);
//  - writes a 16-byte block in front of the packet (XDP metadata, bpf_xdp_adjust_meta): the
//    receive time in ns of CLOCK_TAI taken here, at the driver's receive hook, or the NIC's
//    hardware receive stamp (bpf_xdp_metadata_rx_timestamp) when the driver gives one that is
//    within a millisecond of it (a NIC clock kept on TAI, as ptp4l does; any other NIC clock
//    is not comparable with the sender's stamps and is not used), then flags and a check word.
//
// The two bpf_xdp_metadata_* calls are kernel functions of the device: linerate's loader
// resolves them in the kernel's BTF and loads the program bound to the interface; where that
// is not possible (generic XDP, an older kernel, a driver without them) it replaces each call
// by "return -EOPNOTSUPP", and the program still stamps with the software clock.
//
// Rebuild with bpf/build.sh; the object is committed and checked against this source by
// crates/linerate/tests/xdp_object.rs. The layout of `struct lr_meta` is read by
// crates/linerate/src/port/xdp/mod.rs (META_*).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

extern int bpf_xdp_metadata_rx_vlan_tag(const struct xdp_md *ctx, __u16 *vlan_proto,
					__u16 *vlan_tci) __ksym;
extern int bpf_xdp_metadata_rx_timestamp(const struct xdp_md *ctx, __u64 *timestamp) __ksym;

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} xsks_map SEC(".maps");

// In front of the packet, read by the port. check = LR_META_MAGIC ^ packet length.
struct lr_meta {
	__u64 rx_tai_ns;
	__u32 flags;
	__u32 check;
};

#define LR_META_MAGIC 0x4c524d31u	// "LRM1"
#define LR_META_HW 1u			// rx_tai_ns is the NIC's stamp
#define LR_META_VLAN 2u			// a VLAN tag was put back
#define LR_META_VLAN_LOST 4u		// the NIC had a tag that could not be put back
#define HW_WINDOW_NS 1000000ull

static __always_inline __u16 bswap16(__u16 x)
{
	return (__u16)((x << 8) | (x >> 8));
}

SEC("xdp")
int lr_xsk_meta(struct xdp_md *ctx)
{
	__u32 q = ctx->rx_queue_index;
	if (!bpf_map_lookup_elem(&xsks_map, &q))
		return XDP_PASS;
	__u64 sw = bpf_ktime_get_tai_ns();
	__u32 flags = 0;

	__u16 proto = 0, tci = 0;
	if (bpf_xdp_metadata_rx_vlan_tag(ctx, &proto, &tci) == 0) {
		flags |= LR_META_VLAN_LOST;
		if (bpf_xdp_adjust_head(ctx, -4) == 0) {
			__u8 *d = (void *)(long)ctx->data;
			__u8 *end = (void *)(long)ctx->data_end;
			if (d + 16 <= end) {
				// Destination and source MAC 4 bytes earlier, then the tag (TPID as
				// given, in network order; TCI in host order).
#pragma unroll
				for (int i = 0; i < 12; i++)
					d[i] = d[i + 4];
				*(__u16 *)(d + 12) = proto;
				*(__u16 *)(d + 14) = bswap16(tci);
				flags = LR_META_VLAN;
			}
		}
	}

	__u64 ts = sw, hw = 0;
	if (bpf_xdp_metadata_rx_timestamp(ctx, &hw) == 0 && hw != 0 &&
	    (hw > sw ? hw - sw : sw - hw) < HW_WINDOW_NS) {
		ts = hw;
		flags |= LR_META_HW;
	}

	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(struct lr_meta)) == 0) {
		struct lr_meta *m = (void *)(long)ctx->data_meta;
		void *d = (void *)(long)ctx->data;
		if ((void *)(m + 1) <= d) {
			m->rx_tai_ns = ts;
			m->flags = flags;
			m->check = LR_META_MAGIC ^ (__u32)(ctx->data_end - ctx->data);
		}
	}
	return bpf_redirect_map(&xsks_map, q, XDP_PASS);
}

char _license[] SEC("license") = "Dual MIT/GPL";
