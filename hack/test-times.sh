#!/usr/bin/env bash
# Prints each test package's time from go test's output (the log `make test`
# tees, or standard input): slowest first, then the total, then a closing
# line "packages: N passed, N failed".
#
#   hack/test-times.sh [LOG]
#
# It reads go test's package lines, "ok <pkg> <secs>s" and
# "FAIL <pkg> <secs>s" (a package that did not build has no time: 0).
set -euo pipefail
LOG=${1:--}
if [[ $LOG != - && ! -s $LOG ]]; then
  echo "test-times: no go test output in $LOG" >&2
  exit 0
fi
awk '
  # ok  <pkg> 12.3s [coverage...] | FAIL <pkg> 12.3s | FAIL <pkg> [build failed]
  ($1 == "ok" || $1 == "FAIL") && NF >= 3 && $2 ~ /\// {
    secs = 0
    if ($3 ~ /^[0-9.]+s$/) { secs = substr($3, 1, length($3) - 1) + 0 }
    else if ($3 == "(cached)") { secs = 0 }
    else if ($3 !~ /^\[/) { next }
    status = ($1 == "ok") ? "ok" : "FAIL"
    printf "%10.1f\t%s\t%s\n", secs, status, $2
  }
' "$LOG" | sort -t$'\t' -k1,1gr | awk -F'\t' '
  BEGIN { print "==> test time per package, slowest first" }
  { printf "%8.1fs  %-4s  %s\n", $1, $2, $3; total += $1; n++; if ($2 == "FAIL") failed++ }
  END {
    printf "%8.1fs  total of %d packages (%.1f min)\n", total, n, total / 60
    printf "packages: %d passed, %d failed\n", n - failed, failed
  }
'
