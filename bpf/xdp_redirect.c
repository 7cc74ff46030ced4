// SPDX-License-Identifier: (Apache-2.0 OR MIT) AND GPL-2.0-only
// linerate's XDP program: packets of a receive queue with an AF_XDP socket in `xsks_map` go to
// that socket; everything else (no socket on the queue) continues up the stack (XDP_PASS).
//
// Rebuild with bpf/build.sh; the object is committed and checked against this source by
// crates/linerate/tests/xdp_object.rs. The loader creates the map itself and patches the one
// map reference (relocation against `xsks_map`), so the map definition below only has to name
// the symbol; no BTF is needed.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} xsks_map SEC(".maps");

SEC("xdp")
int lr_xsk_redirect(struct xdp_md *ctx)
{
	// The low bits of flags are the action when the map has no entry for the key (5.3+).
	return bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
}

char _license[] SEC("license") = "Dual MIT/GPL";
