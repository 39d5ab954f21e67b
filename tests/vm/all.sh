#!/usr/bin/env bash
# In-guest suites in one boot: all.sh [DIR | SUITE.sh]... runs each SUITE and
# every DIR/*.sh (default tests/vm; all but this file and lib.sh) in turn and
# closes with the summed "N passed, N failed" line.
#
# tests/vm/*.sh expect the default guest (2 CPUs); tests/vm/smt2llc/*.sh one
# with SMT siblings and two LLCs (see scripts/test.sh).
set -u
cd "$(dirname "$0")/../.."
[ $# -gt 0 ] || set -- tests/vm
what="$*"
suites=()
for arg in "$@"; do
	if [ -d "$arg" ]; then suites+=("$arg"/*.sh); else suites+=("$arg"); fi
done
passed=0 failed=0
for suite in "${suites[@]}"; do
	case "$suite" in */all.sh | */lib.sh) continue ;; esac
	echo "=== $suite"
	start=$SECONDS
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
	echo "=== $suite took $((SECONDS - start)) s"
done
echo "vm ($what): $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
