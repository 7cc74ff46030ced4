#!/bin/sh
# fwd at MTU 9000, 300000 frames at 150 kpps (hostile report's command), own namespaces.
L=$1; P=lrj$$
ip netns add ${P}a; ip netns add ${P}b
ip link add ${P}a0 netns ${P}a type veth peer name ${P}b0 netns ${P}b
ip link add ${P}a1 netns ${P}a type veth peer name ${P}b1 netns ${P}b
for n in a b; do for i in 0 1; do ip -n ${P}$n link set ${P}$n$i mtu 9000 up; done; done
ip netns exec ${P}b timeout 20 $L fwd -i afpacket:${P}b0 -o afpacket:${P}b1 -t 5 --json --period 0 --no-mac-updating > /tmp/$P.fwd &
sleep 1
ip netns exec ${P}a timeout 10 $L gen -o afpacket:${P}a0 -c 300000 --rate 150kpps --no-probe >/dev/null
wait
tail -1 /tmp/$P.fwd | python3 -c 'import json,sys; j=json.load(sys.stdin); p=j["ports"]; print("rx", p[0]["received"], "dropped", p[0]["dropped"], p[0]["drops_by_reason"]["kernel"], "sent", p[1]["sent"])'
ip netns del ${P}a; ip netns del ${P}b; rm -f /tmp/$P.fwd
