// SPDX-License-Identifier: (Apache-2.0 OR MIT) AND GPL-2.0-only
// linerate fwd's kernel engine: l2fwd in XDP. A frame arriving on an input interface gets
// l2fwd's MAC rewrite (if asked) and is redirected through a DEVMAP to the paired output. Each
// input runs its own instance of the program, configured by its own one-entry map. Per-CPU
// counters per output port: sent (redirected), dropped (no output, too short); one per frame.
//
// Rebuild with bpf/build.sh; the object is committed and checked against this source by
// crates/linerate/tests/xdp_object.rs. The loader (crates/linerate/src/port/xdp/kfwd.rs)
// creates the three maps and patches the map references; only the symbols matter here.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define LR_FWD_MAC 1

// Keep in step with `Cfg` in kfwd.rs.
struct lr_fwd_cfg {
	__u32 port;	// this input's port number (0 or 1)
	__u32 out;	// output port number = key in lr_fwd_ports
	__u32 flags;	// LR_FWD_MAC: rewrite the addresses
	__u8 dst[6];
	__u8 src[6];
};

// One entry (key 0): each input interface gets its own instance of the program with its own
// config map, so that the per-packet lookup is an array's (inlined by the verifier), not a hash
// of the ingress ifindex (a call and a hash per packet).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lr_fwd_cfg);
} lr_fwd_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 2);
	__type(key, __u32);	// port number
	__type(value, __u32);	// ifindex
} lr_fwd_ports SEC(".maps");

// Key port * 4 + counter: 1 sent, 2 dropped (0 unused: received = sent + dropped of the
// input's output port).
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u64);
} lr_fwd_stats SEC(".maps");

static __always_inline void count(__u32 key)
{
	__u64 *n = bpf_map_lookup_elem(&lr_fwd_stats, &key);

	if (n)
		*n += 1;
}

SEC("xdp")
int lr_xdp_fwd(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct lr_fwd_cfg *c = bpf_map_lookup_elem(&lr_fwd_cfg, &zero);
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	long act;

	if (!c)
		return XDP_PASS;
	// Received is not counted: every frame is then counted once, sent or dropped, under its
	// output port, and an input has one output (the loader adds them up).
	if (data + 14 > end) {
		count(c->out * 4 + 2);
		return XDP_DROP;
	}
	if (c->flags & LR_FWD_MAC) {
		__builtin_memcpy(data, c->dst, 6);
		__builtin_memcpy(data + 6, c->src, 6);
	}
	// The low bits of flags are the action when the map has no entry for the key.
	act = bpf_redirect_map(&lr_fwd_ports, c->out, XDP_DROP);
	count(c->out * 4 + (act == XDP_REDIRECT ? 1 : 2));
	return act;
}

char _license[] SEC("license") = "Dual MIT/GPL";
