#!/usr/bin/env bash
# Every in-guest suite in one boot: runs tests/vm/*.sh (all but this file and
# lib.sh) in turn and closes with the summed "N passed, N failed" line.
set -u
cd "$(dirname "$0")/../.."
passed=0 failed=0
for suite in tests/vm/*.sh; do
	case "$suite" in */all.sh | */lib.sh) continue ;; esac
	echo "=== $suite"
	out=$(mktemp)
	bash "$suite" 2>&1 | tee "$out"
	line=$(grep -E '^vm-tests: [0-9]+ passed, [0-9]+ failed$' "$out" | tail -n1)
	if [ -z "$line" ]; then
		echo "not ok - $suite ended without a summary"
		failed=$((failed + 1))
	else
		set -- $line
		passed=$((passed + $2)) failed=$((failed + $4))
	fi
	rm -f "$out"
done
echo "vm: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
