# The second node of `slurm/local-cluster up --nodes 2`, sourced by local-cluster (not run on its own).
#
# Node 2 is a slurmd in a network namespace of its own (address $NODE2_ADDR, the host's end of the veth pair
# at $HOST_ADDR), a UTS namespace (hostname $NODE2) and a mount namespace in which its files under
# /etc/netns/$NETNS/ are bound over /etc (as `ip netns exec` does): its own /etc/hosts (node 1's name at
# $HOST_ADDR, since 127.0.0.1 in there is its own loopback) and its own /etc/slurm/slurm.conf (controller and
# node 1 at $HOST_ADDR, its own spool dir, pid file and log), which every Slurm command on node 2 reads too.
# munge's socket is a path, shared by both nodes; /var/lib, /var/log and /tmp are the machine's own.

readonly NETNS=comedy-node2
readonly VETH_HOST=comedy-n2h # the host's end (node 1, slurmctld)
readonly VETH_NODE=comedy-n2  # node 2's end, inside $NETNS
readonly PAIR_NET=10.213.2.0/30
readonly HOST_ADDR=10.213.2.1
readonly NODE2_ADDR=10.213.2.2
readonly NETNS_ETC=/etc/netns/$NETNS
readonly TASK_PROLOG=$STATE_DIR/task-prolog
NODE2=$(hostname -s)-node2
readonly NODE2
# Exit status of `up --nodes 2` when this machine cannot make namespaces (the tests skip on it).
readonly EXIT_NO_NAMESPACES=3

# Node 2's slurm.conf: the cluster's, with everything node 1 and the controller were at 127.0.0.1 (or
# localhost) moved to the host's veth address, and node 2's own daemon files.
render_node2_conf() {
    sed -e "s|(127\.0\.0\.1)|($HOST_ADDR)|" -e "s|NodeAddr=127\.0\.0\.1|NodeAddr=$HOST_ADDR|" \
        -e "s|^AccountingStorageHost=localhost|AccountingStorageHost=$HOST_ADDR|" \
        -e "s|^SlurmdSpoolDir=.*|SlurmdSpoolDir=$STATE_DIR/slurmd-node2|" \
        -e "s|^SlurmdPidFile=.*|SlurmdPidFile=$RUN_DIR/slurmd-node2.pid|" \
        -e "s|^SlurmdLogFile=.*|SlurmdLogFile=$LOG_DIR/slurmd-node2.log|" "$CONF_DIR/slurm.conf"
}

render_node2_hosts() {
    printf '127.0.0.1 localhost\n%s %s\n%s %s\n' "$HOST_ADDR" "$(hostname -s)" "$NODE2_ADDR" "$NODE2"
}

# --- processes in the namespace --------------------------------------------------------------------

netns_exists() { [[ -e /run/netns/$NETNS ]]; }
# Every process in node 2's namespace (its slurmd, and the slurmstepd and tasks of its jobs).
netns_pids() { netns_exists && ip netns pids "$NETNS" 2>/dev/null || true; }
node2_slurmd_running() { [[ -s $RUN_DIR/slurmd-node2.pid && -n "$(node2_slurmd_pids)" ]]; }
# Node 2's slurmd, found by its node name (even one left in a namespace that is gone), never node 1's.
node2_slurmd_pids() {
    local pid
    for pid in $(pgrep -r "$LIVE_STATES" -x slurmd); do
        [[ "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" != *"-N $NODE2 "* ]] || echo "$pid"
    done
    return 0
}

# --- the namespace and its veth pair ---------------------------------------------------------------

node2_net_ready() {
    netns_exists && [[ "$(ip -o addr show dev "$VETH_HOST" 2>/dev/null)" == *" $HOST_ADDR/"* ]] &&
        [[ "$(ip netns exec "$NETNS" ip -o addr show dev "$VETH_NODE" 2>/dev/null)" == *" $NODE2_ADDR/"* ]]
}

# Make the namespace, or say why it cannot be made (exit $EXIT_NO_NAMESPACES).
make_node2_net() {
    local tool
    for tool in ip unshare nsenter; do
        command -v "$tool" >/dev/null || die "--nodes 2 needs '$tool' (apt-get install iproute2 util-linux)"
    done
    node2_net_ready && return 0
    # Half made (or its veth was removed): start over, with nothing left running in the old namespace.
    remove_node2
    local err
    if ! err=$(ip netns add "$NETNS" 2>&1); then
        printf '[local-cluster] error: cannot make network namespace %s (%s).\n' "$NETNS" "$err" >&2
        printf '[local-cluster] --nodes 2 needs root with CAP_NET_ADMIN and CAP_SYS_ADMIN (a container: --privileged,\n' >&2
        printf '[local-cluster] or --cap-add NET_ADMIN --cap-add SYS_ADMIN); the one-node cluster (up) needs neither.\n' >&2
        exit "$EXIT_NO_NAMESPACES"
    fi
    ip link add "$VETH_HOST" type veth peer name "$VETH_NODE" &&
        ip link set "$VETH_NODE" netns "$NETNS" &&
        ip addr add "$HOST_ADDR/30" dev "$VETH_HOST" && ip link set "$VETH_HOST" up &&
        ip netns exec "$NETNS" ip addr add "$NODE2_ADDR/30" dev "$VETH_NODE" &&
        ip netns exec "$NETNS" ip link set "$VETH_NODE" up &&
        ip netns exec "$NETNS" ip link set lo up ||
        { remove_node2_net; die "could not set up the veth pair $VETH_HOST <-> $VETH_NODE ($PAIR_NET)"; }
    say "network namespace $NETNS: $NODE2 at $NODE2_ADDR, this host at $HOST_ADDR ($VETH_HOST)"
}

remove_node2_net() {
    ip link del "$VETH_HOST" 2>/dev/null || true
    ! netns_exists || ip netns delete "$NETNS" 2>/dev/null || true
}

# gloo binds to the address its host's name resolves to: on node 1 that is 127.0.0.1 (/etc/hosts), which
# node 2 cannot reach. A real cluster's hosts resolve to their network address; here a job on more than one
# node is pointed at the veth on each side (each node sees only its own end of $PAIR_NET).
write_task_prolog() {
    local new=$TASK_PROLOG.new
    cat >"$new" <<EOF
#!/bin/sh
# Written by slurm/local-cluster up --nodes 2 (TaskProlog): gloo's interface for jobs on both nodes.
[ "\${SLURM_JOB_NUM_NODES:-1}" -gt 1 ] || exit 0
ifname=\$(ip -o -4 addr show to $PAIR_NET | awk '{ print \$2; exit }')
[ -z "\$ifname" ] || echo "export GLOO_SOCKET_IFNAME=\$ifname"
EOF
    chmod 755 "$new" && mv "$new" "$TASK_PROLOG"
}

# The cluster's slurm.conf for two nodes: the one-node file, plus node 2 and partition `pair`.
render_pair_section() {
    local cpus mem_mb
    cpus=$(machine_cpus)
    mem_mb=$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 * 0.98 }' /proc/meminfo)
    sed -e "s|@HOSTNAME@|$(hostname -s)|g" -e "s|@NODE2@|$NODE2|g" -e "s|@NODE2_ADDR@|$NODE2_ADDR|g" \
        -e "s|@CPUS@|$cpus|g" -e "s|@REAL_MEMORY@|$mem_mb|g" -e "s|@TASK_PROLOG@|$TASK_PROLOG|g" \
        "$TEMPLATES/slurm-node2.conf.in"
}

# Write node 2's /etc (hosts, slurm/slurm.conf) under $NETNS_ETC; return 0 when slurm.conf changed.
install_node2_etc() {
    install -d -m 755 "$NETNS_ETC/slurm"
    install -d -m 700 "$STATE_DIR/slurmd-node2"
    render_node2_hosts >"$NETNS_ETC/hosts"
    if [[ -f $NETNS_ETC/slurm/slurm.conf ]] && cmp -s <(render_node2_conf) "$NETNS_ETC/slurm/slurm.conf"; then
        return 1
    fi
    render_node2_conf >"$NETNS_ETC/slurm/slurm.conf.new" && mv "$NETNS_ETC/slurm/slurm.conf.new" "$NETNS_ETC/slurm/slurm.conf"
}

node2_etc_current() {
    [[ -f $NETNS_ETC/slurm/slurm.conf ]] && cmp -s <(render_node2_conf) "$NETNS_ETC/slurm/slurm.conf" &&
        cmp -s <(render_node2_hosts) "$NETNS_ETC/hosts"
}

# --- node 2's slurmd -------------------------------------------------------------------------------

start_node2_slurmd() {
    local restart=$1 log=$LOG_DIR/slurmd-node2.log pids
    mapfile -t pids < <(node2_slurmd_pids)
    if [[ ${#pids[@]} -gt 0 && $restart == 0 ]]; then
        say "slurmd ($NODE2): already running"
        return
    fi
    [[ ${#pids[@]} -eq 0 ]] || stop_pids "slurmd ($NODE2)" "${pids[@]}"
    rm -f "$RUN_DIR/slurmd-node2.pid"
    # Node 2's network, its own hostname (UTS) and its own /etc/hosts and slurm.conf (a mount namespace
    # of its own), then slurmd as node $NODE2; its slurmstepds and their tasks inherit all three.
    # Not `ip netns exec`: that mounts a fresh /sys, without the cgroup hierarchy slurmd needs.
    detach "$log" nsenter --net="/run/netns/$NETNS" unshare --mount --uts --propagation slave -- sh -c \
        "mount --bind '$NETNS_ETC/hosts' /etc/hosts && mount --bind '$NETNS_ETC/slurm/slurm.conf' $CONF_DIR/slurm.conf &&
         hostname '$NODE2' && exec slurmd -N '$NODE2'"
    wait_for slurmd "slurmd of $NODE2 running (pid file $RUN_DIR/slurmd-node2.pid)" "$log" node2_slurmd_running
    say "slurmd ($NODE2): started in namespace $NETNS"
}

# Stop node 2: its slurmd, then whatever its jobs left in the namespace; then the namespace, veth and files.
remove_node2() {
    local pids
    mapfile -t pids < <(node2_slurmd_pids)
    if [[ ${#pids[@]} -gt 0 ]]; then
        stop_pids "slurmd ($NODE2)" "${pids[@]}"
        say "slurmd ($NODE2): stopped"
    fi
    mapfile -t pids < <(netns_pids)
    if [[ ${#pids[@]} -gt 0 ]]; then
        stop_pids "node $NODE2's job processes" "${pids[@]}"
        say "stopped ${#pids[@]} job process(es) left on $NODE2"
    fi
    if netns_exists || ip link show "$VETH_HOST" >/dev/null 2>&1; then
        remove_node2_net
        say "network namespace $NETNS and veth $VETH_HOST removed"
    fi
    rm -rf "$NETNS_ETC" "$RUN_DIR/slurmd-node2.pid" "$TASK_PROLOG"
}

node2_present() { netns_exists || ip link show "$VETH_HOST" >/dev/null 2>&1 || [[ -e $NETNS_ETC ]]; }
