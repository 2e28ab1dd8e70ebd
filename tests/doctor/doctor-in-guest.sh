#!/bin/sh
# `wimm doctor` on Soft-RoCE, inside the guest (tests/softroce/run):
#
#   tests/doctor/doctor-in-guest.sh BUILD_DIR
#
# 1. a healthy loopback pair on rxe0 passes steps 0-4; step 5 is n/a there,
#    because rxe hands a packet for its own GID straight to its receive path
#    (rxe_net.c, the loopback branch) and nothing crosses the netdev: the
#    doctor captures on d0 and finds 0 RoCEv2 packets;
# 2. each --inject FAULT fails at the step it belongs to, the steps before
#    it pass, and the exit status is 1;
# 3. ERRATA E2 on the wire: two rxe devices on the two ends of a veth pair,
#    the doctor on rxe1 against `wimm doctor --serve` on rxe2. Its capture on
#    v0 must show the 3000-byte probe (MTU 1024) as Write First (RETH, DMA
#    length 3000), Middle, Last with Immediate (the imm in the last packet),
#    and the 0-byte and 64-byte probes as Write Only with Immediate. The
#    JSON packet list is checked here, apart from the doctor's own step 5.
#
# Why one namespace and policy routing, not two network namespaces: the
# guest's kernel (Debian 12, 6.1) creates rxe's UDP socket and looks up its
# routes in init_net only, so an rxe on a netdev in another namespace
# neither sends nor receives. In one namespace both veth addresses are
# local and the kernel would route 192.0.3.1 -> 192.0.3.2 over lo, where no
# rxe listens; rules that send locally generated traffic for the peer
# address out of the veth (iif lo, before the local table), accept_local
# and static neighbours make the packets cross v0 -> v1 for real.
#
# Prints ok / not ok lines and "N passed, N failed"; exit 1 on a failure.
set -u

build=${1:?usage: doctor-in-guest.sh BUILD_DIR}
W=$build/tools/wimm
dev=${WIMM_SOFTROCE_DEVICE:-rxe0}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

cleanup_veth() {
	rdma link delete rxe1 2>/dev/null
	rdma link delete rxe2 2>/dev/null
	ip link delete v0 2>/dev/null
	ip rule del pref 10 2>/dev/null
	ip rule del pref 11 2>/dev/null
	ip rule show | grep -q '^0:' || ip rule add pref 0 lookup local
	ip rule del pref 100 2>/dev/null
}
trap 'cleanup_veth; rm -rf "$work"' EXIT

if [ ! -x "$W" ]; then
	not_ok "$W is not built"
	finish
	exit 1
fi

# ------------------------------------------------------- 1. healthy loopback
echo "# ---- healthy loopback pair on $dev (as printed):"
"$W" doctor -f "verbs:$dev"
echo "# exit $?"
"$W" doctor -f "verbs:$dev" --json >"$work/healthy.json"
rc=$?
check "healthy loopback on $dev: exit 0 (got $rc)" [ "$rc" -eq 0 ]
check "healthy loopback: steps 0-4 pass" json_check "$work/healthy.json" \
	'all(s["status"] == "pass" for s in r["steps"][:5])'
check "healthy loopback: step 5 n/a, 0 RoCEv2 packets on the netdev (rxe loopback)" \
	json_check "$work/healthy.json" \
	'r["steps"][5]["status"] == "n/a" and "captured 0 RoCEv2" in r["steps"][5]["evidence"]'

# ---------------------------------------------------------- 2. the faults
for spec in no-recv:0 qp-rtr:1 mr-dereg:2 no-remote-write:3 cq-small:4; do
	fault=${spec%:*}
	want=${spec#*:}
	"$W" doctor -f "verbs:$dev" --inject "$fault" --json >"$work/$fault.json"
	rc=$?
	check "--inject $fault: exit 1 (got $rc)" [ "$rc" -eq 1 ]
	check "--inject $fault: diagnosed at step $want, the steps before it pass" \
		json_check "$work/$fault.json" \
		"r['verdict']['step'] == $want and all(s['status'] == 'pass' for s in r['steps'][:$want])"
	json_check "$work/$fault.json" --symptoms
done
echo "# ---- a failing report (--inject no-recv, as printed):"
"$W" doctor -f "verbs:$dev" --inject no-recv
echo "# exit $?"

# ------------------------------------------------- 3. E2 across a veth pair
veth_up() {
	ip link add v0 type veth peer name v1 &&
		ip addr add 192.0.3.1/24 dev v0 && ip addr add 192.0.3.2/24 dev v1 &&
		ip link set v0 up && ip link set v1 up &&
		for k in all v0 v1; do
			sysctl -qw net.ipv4.conf.$k.accept_local=1 net.ipv4.conf.$k.rp_filter=0 || return 1
		done &&
		ip neigh replace 192.0.3.2 lladdr "$(cat /sys/class/net/v1/address)" dev v0 nud permanent &&
		ip neigh replace 192.0.3.1 lladdr "$(cat /sys/class/net/v0/address)" dev v1 nud permanent &&
		ip route add 192.0.3.2 dev v0 src 192.0.3.1 table 100 &&
		ip route add 192.0.3.1 dev v1 src 192.0.3.2 table 101 &&
		ip rule add pref 10 iif lo to 192.0.3.2 lookup 100 &&
		ip rule add pref 11 iif lo to 192.0.3.1 lookup 101 &&
		ip rule add pref 100 lookup local && ip rule del pref 0 &&
		rdma link add rxe1 type rxe netdev v0 && rdma link add rxe2 type rxe netdev v1 || return 1
	i=0
	until rdma link show rxe1/1 2>/dev/null | grep -q 'state ACTIVE' &&
		rdma link show rxe2/1 2>/dev/null | grep -q 'state ACTIVE'; do
		i=$((i + 1))
		[ $i -lt 100 ] || return 1
		sleep 0.1
	done
}
if check "veth pair v0/v1 with rxe1/rxe2 up" veth_up; then
	serve_start verbs:rxe2
	"$W" doctor -f verbs:rxe1 -p "${port:-1}" -v --json 192.0.3.2 >"$work/e2.json" \
		2>"$work/frames.txt"
	rc=$?
	wait "$spid"
	echo "# ---- rxe1 -> rxe2 over veth (JSON):"
	cat "$work/e2.json"
	echo "# ---- captured frames (headers):"
	sed 's/^/# /' "$work/frames.txt"
	check "rxe1 -> doctor peer on rxe2: exit 0, all six steps pass (got $rc)" \
		json_check "$work/e2.json" 'all(s["status"] == "pass" for s in r["steps"])'
	check "E2: the 3000-byte write is Write First (RETH len 3000, no imm), Middle, Last with Immediate (imm 0xd0c70002)" \
		json_check "$work/e2.json" \
		"any([p['opcode'] for p in m] == [6, 7, 9] and m[0]['reth']['dma_len'] == 3000 and 'imm' not in m[0] and 'imm' not in m[1] and 'reth' not in m[1] and 'reth' not in m[2] and m[2].get('imm') == 0xd0c70002 for m in msgs(r))"
	check "E2: the 0-byte write is one Write Only with Immediate (RETH len 0, imm 0xd0c70000)" \
		json_check "$work/e2.json" \
		"any([p['opcode'] for p in m] == [11] and m[0]['reth']['dma_len'] == 0 and m[0].get('imm') == 0xd0c70000 for m in msgs(r))"
	check "E2: the 64-byte write is one Write Only with Immediate (RETH len 64, imm 0xd0c70001)" \
		json_check "$work/e2.json" \
		"any([p['opcode'] for p in m] == [11] and m[0]['reth']['dma_len'] == 64 and m[0].get('imm') == 0xd0c70001 for m in msgs(r))"
	check "E2: the responder's Acknowledges were captured too" \
		json_check "$work/e2.json" 'any(p["opcode"] == 17 for p in r["packets"])'
	echo "# ---- rxe1 -> rxe2 over veth (as printed):"
	serve_start verbs:rxe2
	"$W" doctor -f verbs:rxe1 -p "${port:-1}" 192.0.3.2
	echo "# exit $?"
	wait "$spid"
fi

finish
