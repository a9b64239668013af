# shellcheck shell=bash
# shellcheck disable=SC2154 # json, work, rows, started and the ls_* are scripts/demo's
# demo-show.sh is sourced by scripts/demo: how the tour runs a command and
# shows it (a table, or JSON kept for the closing document with --json),
# and its headings.

# step TITLE: a heading on stderr, with the seconds since the start.
step() { printf '\n== %s  [%ds]\n' "$*" $(($(ls_now) - started)) >&2; }

# out: copy a result to stdout, a blank line after it in table mode.
out() { cat; [ "$json" = true ] || echo; }

# align: tab-separated rows as a table with aligned columns (column(1) is
# not on every machine).
align() {
  awk -F'\t' '{ for (i = 1; i <= NF; i++) { c[NR, i] = $i; if (length($i) > w[i]) w[i] = length($i) } n[NR] = NF }
    END { for (r = 1; r <= NR; r++) { line = ""
      for (i = 1; i <= n[r]; i++) line = line (i < n[r] ? sprintf("%-" w[i] + 2 "s", c[r, i]) : c[r, i])
      print line } }'
}

# json_field FILE KEY: the first "KEY": "value" in a command's JSON (the
# CLI prints the command's own fields before its payload and result).
json_field() { sed -n "s/^  \"$2\": *\"\\([^\"]*\\)\".*/\\1/p" "$1" | head -n1; }

# run_wait NODE KIND PAYLOAD EXPECT: commands run --wait, its progress on
# stderr and the command on stdout (a table; --json: saved for the final
# document). EXPECT is succeeded or failed: a failure the demo expects (the
# faulty node's diagnostic) carries on, and the CLI's "error: … ended
# failed" line for it becomes one line saying it was expected. It sets
# last_id.
run_wait() {
  local node=$1 k=$2 payload=$3 expect=$4 f
  f=$(cmd_file "$node" "$k")
  ls_say "better-compute commands run nodeId=$node kind=$k$([ "$payload" = '{}' ] || echo " payload=$payload") --wait"
  { bc commands run nodeId="$node" kind="$k" payload="$payload" --wait --poll 250ms --json=$json 2>&1 >"$f" || echo $? >"$f.code"; } |
    hide_expected_failure "$expect" >&2
  settle_run "$node" "$k" "$f" "$expect"
}

# cmd_file NODE KIND: where the next command's output goes.
cmd_file() { echo "$work/cmd.$(( ${#rows[@]} + 1 )).$1.$2"; }

# hide_expected_failure EXPECT: copy the CLI's stderr, without its closing
# "error: command … ended failed" line when EXPECT is failed (settle_run
# says it in words instead).
hide_expected_failure() {
  awk -v drop="$([ "$1" = failed ] && echo 1)" '!(drop && /^error: command cmd_[0-9A-Za-z]* ended failed/) { print; fflush() }'
}

# settle_run NODE KIND FILE EXPECT: show the command the CLI wrote to FILE
# (its exit status in FILE.code, none for 0) and check it ended EXPECT.
settle_run() {
  local node=$1 k=$2 f=$3 expect=$4 code=0 id reason
  [ ! -s "$f.code" ] || code=$(cat "$f.code")
  id=$(grep -o 'cmd_[0-9A-Za-z]*' "$f" | head -n1)
  [ -n "$id" ] || { cat "$f" >&2; ls_die "no command id in the answer of commands run $k on $node"; }
  show_command "$k" "$f"
  rows+=("$node $k $id $expect")
  case "$expect:$code" in
    succeeded:0) ;;
    failed:3)
      reason=$(bc commands get "$id" nodeId="$node" --json | sed -n 's/^  "reason": *"\([^"]*\)".*/\1/p')
      ls_say "expected: $k on $node ended failed ($reason); the injected faults are the finding" ;;
    *) ls_die "$k on $node: better-compute exited $code, expected the command to end $expect" ;;
  esac
  last_id=$id
}

# show_command KIND FILE: print a command the CLI wrote as a table; an
# inventory's result becomes one row per GPU rather than one long line.
show_command() {
  [ "$json" = false ] || return 0
  if [ "$1" = inventory.refresh ]; then
    grep -v '^result: ' "$2"
    sed -n 's/^result: //p' "$2" | gpu_table
  else
    cat "$2"
  fi
  echo
}

# gpu_table: the GPUs of an inventory.refresh result (one line of JSON,
# keys sorted, as the CLI prints it) as a table, without needing jq.
gpu_table() {
  awk '
    function field(s, re,   v) {
      if (!match(s, re)) return "-"
      v = substr(s, RSTART, RLENGTH); sub(/^"[A-Za-z]*": *"?/, "", v); sub(/"$/, "", v); return v
    }
    {
      n = split($0, gpus, /\{"busId": */)
      printf "%-4s %-13s %-26s %-44s %-11s %-13s %s\n", "GPU", "BUS ID", "NAME", "UUID", "ECC UNCORR", "REMAP PENDING", "PCIE"
      for (i = 2; i <= n; i++) {
        g = "\"busId\":" gpus[i]
        printf "%-4s %-13s %-26s %-44s %-11s %-13s x%s Gen%s\n", field(g, "\"index\": *[0-9]+"), field(g, "\"busId\": *\"[^\"]*\""),
          field(g, "\"name\": *\"[^\"]*\""), field(g, "\"uuid\": *\"[^\"]*\""), field(g, "\"uncorrectableVolatile\": *[0-9]+"),
          field(g, "\"pending\": *[a-z]+"), field(g, "\"widthCurrent\": *[0-9]+"), field(g, "\"genCurrent\": *[0-9]+")
      }
    }'
}
