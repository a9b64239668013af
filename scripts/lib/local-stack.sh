# shellcheck shell=bash
# shellcheck disable=SC2154 # ls_name, bin and work are the caller's (below)
# local-stack.sh is sourced by scripts/demo (make demo, and make run, its
# other name) and scripts/kind-dev (a kind module on a stack): the pieces that stand the whole system up on one machine and
# take it down again (bc-server with a generated config, bcd nodes joined with
# one-time tokens on mock GPUs, the CLI pointed at them). It defines functions
# and a few variables only; the caller sets, before sourcing:
#   ls_name  the prefix of every message ("demo", "kind-dev")
#   bin      the absolute directory holding the built binaries
#   work     a private temporary directory, removed by the caller
# and calls ls_stop_all from its EXIT trap.
#
# Nothing it starts writes outside $work, and nothing it runs as root reaches
# the host: each bcd node gets a sysfs root of its own under $work/NODE
# (BCD_SYSFS_ROOT, so inventory.refresh's rescan: true writes there, not to
# /sys/bus/pci/rescan) with its boot id file in it, and node.reboot asks a
# fake logind on a private D-Bus (ls_start_bus; BCD_SYSTEM_BUS_ADDRESS for
# the plugins, DBUS_SYSTEM_BUS_ADDRESS for bcd), never the host's logind.
# TMPDIR is $work/tmp for everything it starts (go-plugin's sockets).

ls_server_pid=""
ls_bus_pid=""
ls_bus_addr=""
# ls_node_pid: each node's running bcd, by node id.
declare -A ls_node_pid=()

# ls_say prints one progress line on stderr, so that stdout stays the
# results (tables, or JSON with --json).
ls_say() { echo "$ls_name: $*" >&2; }

# ls_die names what went wrong and exits 1 (the caller's trap cleans up).
ls_die() { echo "$ls_name: $*" >&2; exit 1; }

# ls_need_bins NAME...: each built binary under $bin, or say to build.
ls_need_bins() {
  local b
  for b in "$@"; do
    case "$b" in
      tools/*) [ -x "$bin/$b" ] || ls_die "$bin/$b is missing; build it with: make demo-tools" ;;
      *) [ -x "$bin/$b" ] || ls_die "$bin/$b is missing; build it with: make build" ;;
    esac
  done
}

# ls_now prints the time in seconds since the epoch (a bash builtin, no fork).
ls_now() { printf '%(%s)T\n' -1; }

# ls_need_cmd CMD INSTALL: CMD on the PATH, or name the command that installs it.
ls_need_cmd() {
  command -v "$1" >/dev/null 2>&1 || ls_die "$1 not found; install it with: $2"
}

# ls_free_port prints a port nothing listens on, below the kernel's
# ephemeral range (where the local end of any outgoing connection may hold
# it, and a listener's bind would fail).
ls_free_port() {
  local p low
  low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  [ "${low:-0}" -gt 21000 ] 2>/dev/null || low=32768
  for _ in $(seq 1 100); do
    p=$(( 20000 + RANDOM % (low - 20000) ))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
  done
  echo "$ls_name: no free port found" >&2
  return 1
}

# ls_wait_for DESCRIPTION SECONDS COMMAND...: poll until COMMAND succeeds.
ls_wait_for() {
  local what=$1 secs=$2
  shift 2
  for _ in $(seq 1 $((secs * 10))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  echo "$ls_name: timed out waiting for $what" >&2
  return 1
}

# ls_start_server writes bc-server's config into $work (an admin token, the
# node gateway with its CA in $work/ca, support bundles in the dir blob store
# $work/blobs), starts it, waits for /readyz, and points the CLI (bc) at it.
# It sets ls_api_port, ls_http_port, ls_gw_port, ls_token and
# ls_server_config. The HTTP listener serves the web console at
# http://127.0.0.1:$ls_http_port/console/ and the API for browsers.
ls_start_server() {
  ls_api_port=$(ls_free_port)
  ls_http_port=$(ls_free_port)
  ls_gw_port=$(ls_free_port)
  ls_token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  ls_server_config="$work/server.yaml"
  mkdir -p "$work/blobs" "$work/ca"
  od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$work/blob.key"
  chmod 600 "$work/blob.key"
  cat >"$ls_server_config" <<YAML
grpcListen: "127.0.0.1:$ls_api_port"
httpListen: "127.0.0.1:$ls_http_port"
shutdownTimeout: 5s
logLevel: info
gateway:
  listen: "127.0.0.1:$ls_gw_port"
  caDir: "$work/ca"
  serverHosts: [127.0.0.1, localhost]
supportBundles:
  blob:
    driver: dir
    dir:
      path: "$work/blobs"
      baseURL: "http://127.0.0.1:$ls_http_port/v1/blobs"
      secretFile: "$work/blob.key"
auth:
  identities:
    - name: local-admin
      tenants: ["*"]
      tokens: ["$ls_token"]
      grants:
        - permission: "*"
          resource: "*"
YAML
  # ls_identities_extra (optional, the caller's): more auth.identities
  # items, indented as the one above (an approver's own token).
  [ -z "${ls_identities_extra:-}" ] || printf '%s\n' "$ls_identities_extra" >>"$ls_server_config"
  # ls_server_extra (optional, the caller's): more top-level YAML (pki: ...).
  [ -z "${ls_server_extra:-}" ] || printf '%s\n' "$ls_server_extra" >>"$ls_server_config"
  chmod 600 "$ls_server_config"
  ls_say "starting bc-server (API 127.0.0.1:$ls_api_port, gateway 127.0.0.1:$ls_gw_port)"
  mkdir -p "$work/tmp"
  TMPDIR="$work/tmp" "$bin/bc-server" --config "$ls_server_config" >"$work/server.log" 2>&1 &
  ls_server_pid=$!
  ls_wait_for "bc-server to be ready" 60 ls_server_ready
  # The CLI reads no one's own config file: only the flags bc passes.
  export BC_CONFIG="$work/bc.yaml"
  : >"$BC_CONFIG"
}

ls_server_ready() {
  (exec 3<>"/dev/tcp/127.0.0.1/$ls_http_port" && printf 'GET /readyz HTTP/1.0\r\n\r\n' >&3 && head -n1 <&3 | grep -q ' 200 ')
}

# bc runs the CLI against the local server as the admin, in $ls_tenant.
bc() {
  "$bin/better-compute" --endpoint "http://127.0.0.1:$ls_api_port" --token "$ls_token" --tenant "$ls_tenant" "$@"
}

# ls_create_tenant TENANT: make the tenant that bc uses from now on.
ls_create_tenant() {
  ls_tenant=$1
  bc api nodes.createTenant tenantId="$ls_tenant" name="$ls_tenant" >/dev/null
}

# ls_create_node NODE: register a node; it has no daemon until ls_join_node.
ls_create_node() {
  bc api nodes.create tenantId="$ls_tenant" nodeId="$1" >/dev/null
}

# ls_start_bus starts a private D-Bus with a fake logind on it
# (internal/tools/fakelogind, built into $bin/tools), in $work/bus, logging
# to $work/fakelogind.log, and sets ls_bus_addr once logind answers. Start
# it before the nodes: their node.reboot asks it.
ls_start_bus() {
  mkdir -p "$work/bus"
  "$bin/tools/fakelogind" --dir "$work/bus" >"$work/fakelogind.log" 2>&1 &
  ls_bus_pid=$!
  ls_wait_for "the fake logind on the private D-Bus" 30 test -s "$work/bus/address"
  ls_bus_addr=$(cat "$work/bus/address")
  ls_say "a private D-Bus with a fake logind ($ls_bus_addr): node.reboot never reaches this machine's logind"
}

# ls_new_boot NODE: a new boot id in NODE's sysfs root, where its bcd
# (bootIdFile) and its plugins (BCD_SYSFS_ROOT) read it.
ls_new_boot() {
  local f="$work/$1/sysroot/proc/sys/kernel/random/boot_id"
  mkdir -p "$(dirname "$f")"
  cat /proc/sys/kernel/random/uuid >"$f"
}

# ls_join_node NODE [FAULTS]: join NODE with a one-time token and run its
# bcd on the mock GPUs (nvmlSource mock:dgxh200) with its own state dir
# under $work/NODE, logging to $work/NODE.log; FAULTS (BCD_NVML_FAULTS,
# e.g. "gpu=3:row-remap-pending") injects GPU faults. Its GPUs are kept in
# $work/NODE/gpus.json (BCD_NVML_MOCK_STATE), which the nvml plugin and the
# mock nvidia-smi ($bin/tools/mocknvidiasmi, BCD_NVIDIA_SMI, which every
# GPU kind runs, gpu.reset too) share: a reset clears a fault there. Its
# sysfs root is $work/NODE/sysroot (an empty PCI bus, a rescan file, the
# boot id) and its system bus the private one (ls_start_bus). With
# ls_trust_anchor set (the caller's: the command-signing root's public
# key), the node is configured with it as its trust anchor. It returns
# once the node's session is open.
ls_join_node() {
  ls_start_node "$@"
  ls_wait_session "$1"
}

# ls_start_node NODE [FAULTS]: ls_join_node without the wait, so that
# several nodes start together; ls_wait_session NODE then waits for each.
ls_start_node() {
  local node=$1 faults=${2:-} join_token dir="$work/$1"
  join_token=$(bc api nodes.createJoinToken tenantId="$ls_tenant" nodeId="$node" | sed -n 's/.*"token": *"\([^"]*\)".*/\1/p')
  [ -n "$join_token" ] || ls_die "no join token in nodes.createJoinToken's answer for $node"
  # ls_no_bus (the caller's): a node without the first-party plugins
  # (scripts/kind-dev's) has no node.reboot, and so needs no private D-Bus.
  [ -n "$ls_bus_addr" ] || [ -n "${ls_no_bus:-}" ] || ls_die "ls_start_bus first: $node's node.reboot must have the private D-Bus to ask"
  mkdir -p "$dir/state" "$dir/sysroot/sys/bus/pci/devices"
  : >"$dir/sysroot/sys/bus/pci/rescan"
  ls_new_boot "$node"
  {
    echo "role: node"
    echo "stateDir: \"$dir/state\""
    # ls_plugin_dir (the caller's): another plugin directory than bin/'s.
    echo "pluginDir: \"${ls_plugin_dir:-$bin/plugins}\""
    echo "nvmlSource: \"mock:dgxh200\""
    echo "bootIdFile: \"$dir/sysroot/proc/sys/kernel/random/boot_id\""
    [ -z "${ls_trust_anchor:-}" ] || echo "trustAnchors: [\"$ls_trust_anchor\"]"
    echo "pluginEnv:"
    echo "  BCD_NVIDIA_SMI: \"$bin/tools/mocknvidiasmi\""
    echo "  BCD_NVML_MOCK_STATE: \"$dir/gpus.json\""
    [ -z "$faults" ] || echo "  BCD_NVML_FAULTS: \"$faults\""
    # The kernel's view (proc/, sys/) and the PCI rescan, under $work.
    echo "  BCD_SYSFS_ROOT: \"$dir/sysroot\""
    # node.reboot asks the fake logind, never this machine's.
    [ -z "$ls_bus_addr" ] || echo "  BCD_SYSTEM_BUS_ADDRESS: \"$ls_bus_addr\""
    # logs.collect assembles its bundle here rather than in the shared /tmp.
    echo "  BCD_LOGS_TMPDIR: \"$dir\""
    # ls_plugin_env_extra (the caller's): more pluginEnv lines, indented as
    # those above; ls_bcd_extra: more top-level bcd.yaml (pluginPinsFile).
    [ -z "${ls_plugin_env_extra:-}" ] || printf '%s\n' "$ls_plugin_env_extra"
    [ -z "${ls_bcd_extra:-}" ] || printf '%s\n' "$ls_bcd_extra"
    echo "logLevel: info"
  } >"$dir/bcd.yaml"
  ls_say "joining $node${faults:+ (injected GPU faults: $faults)}"
  "$bin/bcd" join --config "$dir/bcd.yaml" --token "$join_token" --server "127.0.0.1:$ls_gw_port" --ca-file "$work/ca/ca.pem" >"$work/$node.join.log" 2>&1 ||
    { cat "$work/$node.join.log" >&2; ls_die "bcd join $node failed"; }
  ls_run_bcd "$node"
}

# ls_run_bcd NODE: start NODE's (joined) bcd, logging to $work/NODE.log.
ls_run_bcd() {
  local node=$1
  DBUS_SYSTEM_BUS_ADDRESS="$ls_bus_addr" TMPDIR="$work/tmp" "$bin/bcd" run --config "$work/$node/bcd.yaml" >"$work/$node.log" 2>&1 &
  ls_node_pid[$node]=$!
}

# ls_reboot_node NODE: what a reboot does to NODE, without one: its bcd
# stops, the boot id changes, and bcd starts again (its earlier log is kept
# as $work/NODE.boot-N.log). It returns once the new session is open.
ls_reboot_node() {
  local node=$1 n=1
  ls_stop "${ls_node_pid[$node]}"
  unset "ls_node_pid[$node]"
  while [ -e "$work/$node.boot-$n.log" ]; do n=$((n + 1)); done
  mv "$work/$node.log" "$work/$node.boot-$n.log"
  ls_new_boot "$node"
  ls_say "$node: bcd stopped; a new boot id ($(cat "$work/$node/sysroot/proc/sys/kernel/random/boot_id")); bcd starts again"
  ls_run_bcd "$node"
  ls_wait_session "$node"
}

# ls_wait_session NODE: wait until NODE's bcd has its session open.
ls_wait_session() {
  ls_wait_for "$1's session" 60 grep -q "session open" "$work/$1.log"
}

# ls_stop PID: TERM, up to 10 s to go, then KILL; reaped either way.
ls_stop() {
  local pid=$1
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

# ls_stop_all stops what ls_start_server, ls_start_bus and ls_join_node
# started, by pid: the bcd nodes first (each leaves unfinished work in its
# journal), then the server, then the private D-Bus.
ls_stop_all() {
  local pid
  for pid in "${ls_node_pid[@]}"; do ls_stop "$pid"; done
  ls_node_pid=()
  [ -z "$ls_server_pid" ] || ls_stop "$ls_server_pid"
  ls_server_pid=""
  [ -z "$ls_bus_pid" ] || ls_stop "$ls_bus_pid"
  ls_bus_pid=""
}

# ls_refused_writes prints the log lines in $work that say a write was
# refused as read-only: a process that tried to write outside $work on a
# machine (or in make demo-check's sandbox) where that is not allowed.
ls_refused_writes() {
  grep -Hi "read-only file system" "$work"/*.log 2>/dev/null || true
}

# ls_show_logs prints the last lines of every log in $work, for a failure.
ls_show_logs() {
  local f
  for f in "$work"/*.log; do
    [ -e "$f" ] || continue
    echo "--- $(basename "$f") (last 20 lines)" >&2
    tail -n 20 "$f" >&2 || true
  done
}
