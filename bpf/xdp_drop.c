// SPDX-License-Identifier: (Apache-2.0 OR MIT) AND GPL-2.0-only
// Drops every packet: the receiver of the generation benchmark (bench/gen.sh attaches it with
// `ip link set dev vB xdpdrv obj bpf/xdp_drop.o sec xdp`). A veth that XDP frames are
// redirected to (xdp-trafficgen, `linerate gen --engine live`) needs an XDP program on its
// receiving side. Rebuild with bpf/build.sh.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int lr_drop(struct xdp_md *ctx)
{
	return XDP_DROP;
}

char _license[] SEC("license") = "Dual MIT/GPL";
