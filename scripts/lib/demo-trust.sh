# shellcheck shell=bash
# shellcheck disable=SC2154 # bin, work, json, ls_* and the helpers are scripts/demo's
# demo-trust.sh is sourced by scripts/demo after local-stack.sh: the pieces
# of the tour that show what makes the system trustworthy. It makes a
# command-signing authority and the approver keys with better-compute pki,
# as an operator would (demo_pki), gives each approver an API identity of
# their own (the identity that created a batch may not approve it), shows
# each node's trust bundle from its bcd's log (demo_show_trust), approves a
# batch as one approver, with their own token and key (demo_approve), and
# follows the provision module's remediation in the control plane's
# remediations table (demo_remediation). Everything it writes is under
# $work.

# demo_approvers are the approver keys; the quorum is 2 of them.
demo_approvers=(alice bob carol)
demo_quorum=2
# demo_token: each approver's own API token.
declare -A demo_token=()

# demo_pki makes $work/pki/command-root.pem (the command-signing root, and
# .pub) and $work/pki/NAME.pem (and .pub) for each approver, and sets what
# local-stack.sh's ls_start_server and ls_start_node read: ls_server_extra
# (pki: commandSigning, approvers, approvalThreshold; the provision module's
# remediation on, its pass every second), ls_identities_extra (each
# approver's identity, which may read and approve the tenant's batches and
# nothing else) and ls_trust_anchor (the root's public key, in every node's
# configuration).
demo_pki() {
  local dir="$work/pki" a approvers="" ids=""
  mkdir -p "$dir"
  # The CLI reads no one's own config file (ls_start_server says it again).
  export BC_CONFIG="$work/bc.yaml"
  : >"$BC_CONFIG"
  "$bin/better-compute" pki create-root --out "$dir/command-root.pem" >"$work/pki.log" 2>&1 ||
    { cat "$work/pki.log" >&2; ls_die "better-compute pki create-root failed"; }
  for a in "${demo_approvers[@]}"; do
    "$bin/better-compute" pki create-approver --out "$dir/$a.pem" >>"$work/pki.log" 2>&1 ||
      { cat "$work/pki.log" >&2; ls_die "better-compute pki create-approver for $a failed"; }
    demo_token[$a]=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
    approvers+="
    - {name: $a, publicKey: \"$dir/$a.pem.pub\"}"
    ids+="
    - name: $a
      tenants: [\"$1\"]
      tokens: [\"${demo_token[$a]}\"]
      grants:
        - {permission: \"compute:batches:read\", resource: \"tenant/*\"}
        - {permission: \"compute:batches:approve\", resource: \"tenant/*\"}"
  done
  ls_server_extra="pki:
  commandSigning: \"$dir/command-root.pem\"
  approvers:$approvers
  approvalThreshold: $demo_quorum
modules:
  interval: 1s
  remediation:
    enabled: true"
  ls_identities_extra=${ids#?}
  ls_trust_anchor="$dir/command-root.pem.pub"
}

# bc_as NAME ARGS...: the CLI as approver NAME, with NAME's own token.
bc_as() {
  local who=$1
  shift
  "$bin/better-compute" --endpoint "http://127.0.0.1:$ls_api_port" --token "${demo_token[$who]}" --tenant "$ls_tenant" "$@"
}

# demo_show_trust NODE: NODE's bcd says, at its start, that it holds the
# trust bundle: commands must be signed and destructive ones approved.
demo_show_trust() {
  local line
  line=$(grep -o 'trust bundle: .*' "$work/$1.log" | tail -n1)
  case "$line" in
    *commands_signed=true*batch_quorum=true*) ls_say "$1's bcd: \"$line\": it runs only commands signed by a key that the root certified, and a destructive one only with $demo_quorum approvals" ;;
    *) ls_die "$1's bcd does not hold the trust bundle: ${line:-no trust bundle line in its log}" ;;
  esac
}

# demo_approve NAME BATCH: NAME signs BATCH with their key, on this machine,
# and uploads the signature (better-compute batch approve, as NAME). The
# batch as approved and the CLI's closing line are in demo_approved.
demo_approve() {
  local who=$1 batch=$2 f="$work/approve.$1.$2"
  ls_say "$who: better-compute batch approve --batch $batch --key \$work/pki/$who.pem (with $who's own token)"
  bc_as "$who" batch approve --batch "$batch" --key "$work/pki/$who.pem" >"$f" 2>&1 ||
    { cat "$f" >&2; ls_die "$who's approval of $batch was refused"; }
  demo_approved=$(tail -n1 "$f")
  [ "$json" = true ] || out <"$f"
  ls_say "$who: $demo_approved"
}

# json_bool FILE KEY: the first "KEY": true|false in a command's JSON.
json_bool() { sed -n "s/^  \"$2\": *\\(true\\|false\\).*/\\1/p" "$1" | head -n1; }

# cmd_state ID NODE: the command's state now.
cmd_state() {
  bc commands get "$1" nodeId="$2" --json >"$work/state.json" 2>/dev/null || return 1
  json_field "$work/state.json" state
}

# cmd_is ID NODE STATE: the command is in STATE.
cmd_is() { [ "$(cmd_state "$1" "$2")" = "$3" ]; }

# demo_remediation NODE STATE [WAITING]: the provision module's gpu.reset
# remediation of NODE in STATE (and waiting for WAITING), as "id batch
# command verify-command outcome", from the control plane's table; nothing
# when there is none.
demo_remediation() {
  psql -XAtq -F ' ' -c "SELECT id, batch_id, command_id, coalesce(nullif(verify_command_id, ''), '-'), coalesce(nullif(outcome, ''), '-')
    FROM remediations WHERE node_id = '$1' AND action = 'gpu.reset' AND state = '$2' AND ('${3:-}' = '' OR waiting_reason = '${3:-}')
    ORDER BY created_at DESC LIMIT 1"
}

# demo_remediation_is NODE STATE [WAITING]: there is one.
demo_remediation_is() { [ -n "$(demo_remediation "$@")" ]; }
