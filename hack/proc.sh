# shellcheck shell=bash
# Process checks for the hack/ scripts, sourced, not run. They read /proc
# instead of `kill -0`, which fails with EPERM on another user's live process
# and succeeds on a pid the kernel has since given to an unrelated process.

# When the machine booted, on the wall clock, to the hundredth of a second:
# now less the uptime. (/proc/stat's btime is whole seconds and drifts from
# the wall clock as NTP steers it.)
PROC_BOOT=$(awk -v now="$(date +%s.%N)" '{printf "%.2f", now - $1}' /proc/uptime)
PROC_HZ=$(getconf CLK_TCK)
PROC_STAT=()

# proc_stat reads /proc/$1/stat into PROC_STAT from field 3 on (PROC_STAT[0]
# is the state, PROC_STAT[19] the start time), and fails when there is no
# such process or only a zombie.
proc_stat() {
  local stat
  { read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
  # The command name (field 2) may hold spaces and parentheses: fields 3 on
  # follow the last ')'.
  read -r -a PROC_STAT <<<"${stat##*) }"
  [[ ${PROC_STAT[0]} != Z && ${PROC_STAT[0]} != X ]]
}

# proc_live says whether pid $1 is a running process (not a zombie).
proc_live() { proc_stat "$1"; }

# proc_started prints when process $1 started (seconds since the epoch), and
# fails when there is no such process or only a zombie.
proc_started() {
  proc_stat "$1" || return 1
  awk -v b="$PROC_BOOT" -v t="${PROC_STAT[19]}" -v hz="$PROC_HZ" 'BEGIN {printf "%.2f\n", b + t / hz}'
}

# path_made prints an upper bound on when path $1 was made: its birth time
# where the file system records one, else the oldest modification time of
# it and of its direct entries (each was written after it was made).
path_made() {
  local birth
  birth=$(stat -c %.2W -- "$1" 2>/dev/null || echo 0)
  if [[ $birth =~ ^[0-9.]+$ && $birth != 0 && $birth != 0.00 ]]; then echo "$birth"; return; fi
  find "$1" -maxdepth 1 -printf '%T@\n' 2>/dev/null | sort -g | head -1
}

# proc_made_path says whether pid $1 is a live process that started no
# later than path $2 was made (1 s for the clocks' rounding): the process
# that wrote it. A process started after it holds a reused pid.
proc_made_path() {
  local started made
  started=$(proc_started "$1") || return 1
  made=$(path_made "$2")
  [[ -n $made ]] || return 0
  awk -v s="$started" -v m="$made" 'BEGIN {exit !(s <= m + 1)}'
}
