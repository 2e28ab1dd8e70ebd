#!/bin/sh
# `wimm doctor` on bad input (ctest doctor.bad_input): each is a clear
# error naming the problem, with exit status 2.
#
#   tests/doctor/doctor-input.sh WIMM
set -u

W=${1:?usage: doctor-input.sh WIMM}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

# expect_error DESCRIPTION PATTERN ARGS...: exit 2, PATTERN on stderr.
expect_error() {
	d=$1
	pat=$2
	shift 2
	"$W" doctor "$@" >"$work/out" 2>"$work/err"
	rc=$?
	if [ "$rc" -eq 2 ] && grep -q "$pat" "$work/err"; then
		ok "$d: $(head -n 1 "$work/err")"
	else
		not_ok "$d: exit $rc, stderr: $(head -n 2 "$work/err")"
	fi
}

expect_error "unknown fabric" "unknown fabric 'nosuch'" -f nosuch
expect_error "unknown libfabric provider" "no libfabric provider 'nosuch'" -f ofi:nosuch
expect_error "unknown RDMA device" "no RDMA device 'nosuch'" -f verbs:nosuch
expect_error "unknown fault" "unknown fault 'nosuch'" --inject nosuch -f verbs:rxe0
expect_error "fault on ofi" "needs a verbs device" --inject no-recv -f ofi:tcp

# A port nobody listens on: take a free one and close it again.
free=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
expect_error "a host that refuses" "no doctor answers at 127.0.0.1:$free" \
	-f ofi:tcp -p "$free" 127.0.0.1
# A host that does not answer at all: TEST-NET-1 is never routed, so the
# SYN goes unanswered (or the route is refused at once); both are errors.
expect_error "a host that does not answer" "no doctor answers at 192.0.2.99" \
	-f ofi:tcp --timeout 1 192.0.2.99

# A doctor peer of another version: a fake server greets with version 99.
python3 - "$work/fake.port" <<'PY' &
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(1)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
c, _ = s.accept()
c.recv(200)
c.sendall(b"wimm-doctor 99 ok tcp\n")
c.close()
PY
fpid=$!
i=0
until [ -s "$work/fake.port" ] || [ $i -ge 50 ]; do
	i=$((i + 1))
	sleep 0.1
done
expect_error "a doctor peer of another version" \
	"speaks doctor protocol version 99, this wimm speaks version 1" \
	-f ofi:tcp -p "$(cat "$work/fake.port")" 127.0.0.1
wait $fpid

# The other way round: a client of version 99 against a real server, which
# must answer with an error that names both versions.
if serve_start ofi:tcp; then
	reply=$(python3 - "$port" <<'PY'
import socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
c.sendall(b"wimm-doctor 99 ofi:tcp\n")
print(c.makefile().readline().strip())
PY
)
	wait "$spid"
	check "doctor --serve refuses a client of version 99: '$reply'" \
		[ "$reply" = "wimm-doctor 1 error the client speaks doctor protocol version 99, this wimm speaks version 1: run the same wimm release on both ends" ]
fi
finish
