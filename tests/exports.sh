#!/bin/sh
# The library exports exactly the functions include/wimm.h declares: no
# internal symbol leaks out (hidden visibility + src/libwimm.map), and no
# declared function is missing.  usage: exports.sh LIBWIMM.so WIMM_H
set -eu
lib=${1:?usage: exports.sh LIBWIMM.so WIMM_H}
hdr=${2:?usage: exports.sh LIBWIMM.so WIMM_H}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Text symbols the dynamic table defines (nm -D: "address T name@@version").
nm -D --defined-only "$lib" | awk '$2 ~ /^[TtWw]$/ { sub(/@.*/, "", $3); print $3 }' |
	sort -u >"$work/exported"
# Function declarations of the header: an identifier followed by "(" at
# the start of a declaration, types of any shape in front.
grep -v '^[[:space:]]*[*/#]' "$hdr" | tr '\n' ' ' | tr ';' '\n' |
	grep -o '\bwimm_[a-z0-9_]*[[:space:]]*(' | sed 's/[[:space:]]*($//' |
	sort -u >"$work/declared"
# typedef'd function pointer types are no functions.
grep -o 'typedef[^;]*(\*wimm_[a-z0-9_]*)' "$hdr" | grep -o 'wimm_[a-z0-9_]*' |
	sort -u >"$work/fnptr_types" || true
comm -23 "$work/declared" "$work/fnptr_types" >"$work/functions"

status=0
extra=$(comm -13 "$work/functions" "$work/exported")
missing=$(comm -23 "$work/functions" "$work/exported")
if [ -n "$extra" ]; then
	echo "exported but not in $hdr:"
	echo "$extra" | sed 's/^/  /'
	status=1
fi
if [ -n "$missing" ]; then
	echo "declared in $hdr but not exported:"
	echo "$missing" | sed 's/^/  /'
	status=1
fi
n=$(wc -l <"$work/functions")
[ "$status" -eq 0 ] && echo "exports: the $n functions of $(basename "$hdr"), nothing else"
exit "$status"
