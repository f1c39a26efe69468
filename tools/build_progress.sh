#!/usr/bin/env bash
# Reads a build's output on stdin, appends it to the log file LOG, and shows
# its progress: on a terminal (or with STRATA_PROGRESS=tty) one line that
# updates with the percentage, the elapsed time and the file being compiled;
# elsewhere a line each time another 10% is done. Make prints
# "[ 45%] Building CXX object .../net.cpp.o", Ninja "[12/300] Building ...".
# Usage: BUILD_COMMAND 2>&1 | bash tools/build_progress.sh LOG
set -uo pipefail
log=${1:?usage: build_progress.sh LOG}
mode=${STRATA_PROGRESS:-auto}
if [ "$mode" = auto ]; then
  mode=lines
  [ -t 1 ] && mode=tty
fi

elapsed() { local s=$(($1)); printf '%dm%02ds' $((s / 60)) $((s % 60)); }

t0=$SECONDS
shown=-1
while IFS= read -r line; do
  printf '%s\n' "$line" >> "$log"
  if [[ $line =~ ^\[\ *([0-9]+)%\]\ (.*)$ ]]; then
    pct=${BASH_REMATCH[1]}
    what=${BASH_REMATCH[2]}
  elif [[ $line =~ ^\[([0-9]+)/([0-9]+)\]\ (.*)$ ]] && [ "${BASH_REMATCH[2]}" -gt 0 ]; then
    pct=$((100 * BASH_REMATCH[1] / BASH_REMATCH[2]))
    what=${BASH_REMATCH[3]}
  else
    continue
  fi
  what=${what##*/}  # "Building CXX object framework/CMakeFiles/x.dir/net.cpp.o" -> "net.cpp"
  what=${what%.o}
  if [ "$mode" = tty ]; then
    printf '\r\033[K    building: %3d%%  %s  %s' "$pct" "$(elapsed $((SECONDS - t0)))" "${what:0:50}"
  elif [ $((pct / 10)) -gt "$shown" ]; then
    shown=$((pct / 10))
    printf '    building: %3d%%  %s\n' "$pct" "$(elapsed $((SECONDS - t0)))"
  fi
done
if [ "$mode" = tty ]; then printf '\r\033[K'; fi
exit 0
