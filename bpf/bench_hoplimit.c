// SPDX-License-Identifier: (Apache-2.0 OR MIT) AND GPL-2.0-only
// Benchmark helper for bench/fwd.sh (not used by linerate itself): sets the IPv6 hop limit
// back to 64 and passes the frame up the stack. xdp-trafficgen sends "live" frames that the
// kernel recycles without rewriting their bytes, so a forwarder that edits frames in place
// (Linux ip_forward decrements the hop limit) would otherwise see the limit run out after a
// few dozen uses of each page. Attached on B's input for the ip_forward row only, with
// `ip link set dev IFACE xdpdrv obj bpf/bench_hoplimit.o sec xdp`.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int lr_bench_hl(struct xdp_md *ctx)
{
	unsigned char *data = (void *)(long)ctx->data;
	unsigned char *end = (void *)(long)ctx->data_end;

	// Ethernet (14) + IPv6 hop limit at offset 7.
	if (data + 22 <= end && data[12] == 0x86 && data[13] == 0xdd)
		data[21] = 64;
	return XDP_PASS;
}

char _license[] SEC("license") = "Dual MIT/GPL";
