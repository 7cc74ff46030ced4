// SPDX-License-Identifier: (Apache-2.0 OR MIT) AND GPL-2.0-only
// Test helper (not used by linerate itself): a tc classifier that drops every IPv4 UDP packet
// whose source port is a multiple of 10, and passes everything else. A sender that counts its
// source port up through a range of a multiple of 10 values (`linerate gen --sport 1000-1099`)
// loses exactly one packet in ten, which is the known loss `linerate watch` must find
// (crates/linerate-cli/tests/watch_netns.rs, docs/observe.md). Attach on the ingress of the
// middle box's input:
//   tc qdisc add dev vB0 clsact
//   tc filter add dev vB0 ingress bpf direct-action object-file bpf/test_drop_nth.o section tc
// Rebuild with bpf/build.sh.
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

SEC("tc")
int lr_test_drop10(struct __sk_buff *skb)
{
	unsigned char p[36];

	// Ethernet, IPv4 without options, UDP: the source port is at offset 34. The frame may
	// not be linear (AF_PACKET's transmit ring puts all but the link header in pages), so its
	// bytes are copied out rather than read in place.
	if (bpf_skb_load_bytes(skb, 0, p, sizeof(p)) < 0)
		return TC_ACT_OK;
	if (p[12] != 0x08 || p[13] != 0x00 || p[14] != 0x45 || p[23] != 17)
		return TC_ACT_OK;
	unsigned int sport = ((unsigned int)p[34] << 8) | p[35];
	return sport % 10 == 0 ? TC_ACT_SHOT : TC_ACT_OK;
}

char _license[] SEC("license") = "Dual MIT/GPL";
