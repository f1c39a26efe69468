# shellcheck shell=bash
# Shared by the command-line tests that train the bundled digits model, which
# source it after setting $strata and $src (the source tree): a scratch folder
# removed at exit, a private copy of the digits model and data, and a run in
# the background that a test signals and waits for. The sourcing script
# defines fail().

# $work: a scratch folder (unless the sourcing script made its own); at exit
# a background run still going is killed and the folder removed (KEEP=1 keeps
# it and prints where).
digits_cleanup() {
  if [ -n "${bg_pid:-}" ]; then kill -9 "$bg_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
if [ -z "${work:-}" ]; then
  work=$(mktemp -d)
  bg_pid=""
  trap digits_cleanup EXIT
  if [ -n "${KEEP:-}" ]; then trap - EXIT; echo "work: $work"; fi
fi

# Copies models/digits and data/digits into $work; sets $dir to the model.
setup_digits() {
  mkdir -p "$work/models" "$work/data"
  cp -r "$src/models/digits" "$work/models/digits"
  rm -rf "$work/models/digits/snapshots"
  cp -r "$src/data/digits" "$work/data/digits"
  dir="$work/models/digits"
}

# start_run OUT LOG COMMAND...: COMMAND in the background (stdout to OUT.txt,
# stderr to OUT.err, its pid in $bg_pid); returns once its JSON-lines LOG
# shows training, and half a second more.
start_run() {
  local out="$1" log="$2"
  shift 2
  "$@" > "$out.txt" 2> "$out.err" &
  bg_pid=$!
  for _ in $(seq 1 200); do
    grep -qs '"iteration"' "$log" && break
    kill -0 "$bg_pid" 2>/dev/null || break
    sleep 0.1
  done
  sleep 0.5
  kill -0 "$bg_pid" 2>/dev/null || fail "the run ended before it was signalled: $(cat "$out.err")"
}

# wait_run [SECONDS [OUT]]: the background run must end within SECONDS
# (30); its exit status goes to $rc. OUT is shown when it does not.
wait_run() {
  local secs="${1:-30}"
  for _ in $(seq 1 $((secs * 10))); do
    kill -0 "$bg_pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$bg_pid" 2>/dev/null; then
    [ -z "${2:-}" ] || cat "$2"
    fail "still running $secs s later"
  fi
  rc=0
  wait "$bg_pid" || rc=$?
  bg_pid=""
}

# wait_for_line OUT PATTERN: until OUT has a line matching PATTERN (30 s at
# most) while the background run ($bg_pid) goes on.
wait_for_line() {
  for _ in $(seq 1 300); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    kill -0 "$bg_pid" 2>/dev/null || { cat "$1"; fail "the run ended before a line '$2'"; }
    sleep 0.1
  done
  cat "$1"
  fail "no line '$2' after 30 s"
}

# rank_pid LAUNCHER RANK: the pid of LAUNCHER's child that runs RANK (its
# STRATA_RANK); a message on stderr and status 1 when there is none.
rank_pid() {
  local child
  for child in $(pgrep -P "$1"); do
    if tr '\0' '\n' < "/proc/$child/environ" 2>/dev/null | grep -qx "STRATA_RANK=$2"; then
      echo "$child"
      return 0
    fi
  done
  echo "FAIL: cannot find rank $2 among the children of $1: $(pgrep -P "$1" | tr '\n' ' ')" >&2
  return 1
}
