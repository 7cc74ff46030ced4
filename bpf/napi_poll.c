// SPDX-License-Identifier: (Apache-2.0 OR MIT) AND GPL-2.0-only
// linerate watch's packets-per-poll counter: a raw tracepoint program on napi:napi_poll
// (napi_poll(struct napi_struct *napi, int work, int budget), called after every NAPI poll).
// Per device, keyed by (network namespace inode, ifindex), per CPU: polls, packets, polls that
// used the whole budget and a histogram of packets per poll (0, 1, 2-3, 4-7, 8-15, 16-31,
// 32-63, 64+) in `napi_stats`; the smallest and largest packets of one poll in `napi_minmax`,
// in the slot of the current epoch (linerate flips the epoch, reads the old slot's entries and
// deletes them: per-interval minimum and maximum without racing the counters). Polls of a NAPI context without a
// device (the per-CPU backlog that netif_rx feeds, e.g. a veth without GRO or XDP) are counted
// under key (0, 0).
//
// The offsets of napi_struct.dev, net_device.ifindex, net_device.nd_net and net.ns.inum differ
// between kernels; linerate reads them from the kernel's BTF and writes them into `napi_cfg`
// before attaching, so no BTF relocation is needed here. Rebuild with bpf/build.sh; the object is
// committed and checked against this source by crates/linerate/tests/xdp_object.rs.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct lr_napi_cfg {
	__u32 off_dev;
	__u32 off_ifindex;
	__u32 off_nd_net;
	__u32 off_inum;
	__u32 epoch; // which of two min/max slots polls go to; linerate flips it every interval
};

struct lr_napi_key {
	__u32 netns;
	__u32 ifindex;
};

struct lr_napi_val {
	__u64 polls;
	__u64 packets;
	__u64 full;
	__u64 hist[8];
};

struct lr_napi_mm_key {
	__u32 netns;
	__u32 ifindex;
	__u32 epoch;
	__u32 pad;
};

struct lr_napi_mm {
	__u64 min_plus1; // 0: no poll yet on this CPU
	__u64 max;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lr_napi_cfg);
} napi_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct lr_napi_key);
	__type(value, struct lr_napi_val);
} napi_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct lr_napi_mm_key);
	__type(value, struct lr_napi_mm);
} napi_minmax SEC(".maps");

SEC("raw_tracepoint")
int lr_napi_poll(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 zero = 0;
	struct lr_napi_cfg *c = bpf_map_lookup_elem(&napi_cfg, &zero);
	if (!c)
		return 0;
	char *napi = (char *)ctx->args[0];
	int work = (int)ctx->args[1];
	int budget = (int)ctx->args[2];
	struct lr_napi_key k = { 0, 0 };
	char *dev = 0;
	bpf_probe_read_kernel(&dev, sizeof(dev), napi + c->off_dev);
	if (dev) {
		int ifindex = 0;
		char *net = 0;
		__u32 inum = 0;
		bpf_probe_read_kernel(&ifindex, sizeof(ifindex), dev + c->off_ifindex);
		bpf_probe_read_kernel(&net, sizeof(net), dev + c->off_nd_net);
		if (net)
			bpf_probe_read_kernel(&inum, sizeof(inum), net + c->off_inum);
		k.netns = inum;
		k.ifindex = (__u32)ifindex;
	}
	struct lr_napi_val *v = bpf_map_lookup_elem(&napi_stats, &k);
	if (!v) {
		struct lr_napi_val z = {};
		bpf_map_update_elem(&napi_stats, &k, &z, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&napi_stats, &k);
		if (!v)
			return 0;
	}
	__u64 w = work < 0 ? 0 : (__u64)work;
	v->polls++;
	v->packets += w;
	if (budget > 0 && work >= budget)
		v->full++;
	int b = w == 0 ? 0 : w < 2 ? 1 : w < 4 ? 2 : w < 8 ? 3 : w < 16 ? 4 : w < 32 ? 5 : w < 64 ? 6 : 7;
	v->hist[b & 7]++;
	struct lr_napi_mm_key mk = { k.netns, k.ifindex, c->epoch & 1, 0 };
	struct lr_napi_mm *m = bpf_map_lookup_elem(&napi_minmax, &mk);
	if (!m) {
		struct lr_napi_mm z = {};
		bpf_map_update_elem(&napi_minmax, &mk, &z, BPF_NOEXIST);
		m = bpf_map_lookup_elem(&napi_minmax, &mk);
		if (!m)
			return 0;
	}
	if (m->min_plus1 == 0 || w + 1 < m->min_plus1)
		m->min_plus1 = w + 1;
	if (w > m->max)
		m->max = w;
	return 0;
}

char _license[] SEC("license") = "Dual MIT/GPL";
