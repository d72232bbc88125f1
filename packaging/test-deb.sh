#!/usr/bin/env bash
# Installs the kudurru .deb on this machine and checks what it installed: the sample
# configuration passes `kudurru config check`, the unit passes `systemd-analyze verify`, the
# system calls the server makes are all in the unit's SystemCallFilter, `kudurru serve` from the
# package answers on loopback and exits 0 on SIGTERM (as root, then as an unprivileged user with
# only the unit's capability and memlock limit on port 53), and the man pages and completions
# are in place. Needs root (dpkg). All traffic stays on 127.0.0.1.
#
#   packaging/test-deb.sh [PATH.deb]   (default: the one packaging/build-deb.sh wrote)
#
# KEEP=1 leaves the package installed; otherwise it is purged at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
deb="${1:-$(ls -t "${CARGO_TARGET_DIR:-target}"/debian/kudurru_*.deb | head -n 1)}"
unit=/lib/systemd/system/kudurru.service
conf=/etc/kudurru/kudurru.toml
scratch=$(mktemp -d)
server=""
cleanup() {
    if [ -n "$server" ] && kill -0 "$server" 2>/dev/null; then kill -KILL "$server"; fi
    rm -rf "$scratch"
    if [ "${KEEP:-0}" != 1 ]; then dpkg --purge kudurru >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT
fail() {
    echo "test-deb: FAIL: $*" >&2
    exit 1
}
check() { echo "test-deb: ok: $*"; }

need=()
command -v systemd-analyze >/dev/null || need+=(systemd)
command -v dig >/dev/null || need+=(bind9-dnsutils)
command -v strace >/dev/null || need+=(strace)
command -v setpriv >/dev/null || need+=(util-linux)
command -v man >/dev/null || need+=(man-db)
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

echo "test-deb: installing $deb"
dpkg -i "$deb" >/dev/null
dpkg -s kudurru | grep -q '^Status: install ok installed' || fail "dpkg says kudurru is not installed"
check "installed $(dpkg-query -W -f '${Package} ${Version}' kudurru)"
[ -x /usr/bin/kudurru ] && [ -x /usr/bin/kudurru-bench ] || fail "binaries missing"
grep -qx "$conf" /var/lib/dpkg/info/kudurru.conffiles || fail "$conf is not a conffile"
check "/usr/bin/kudurru, /usr/bin/kudurru-bench; $conf is a conffile"

/usr/bin/kudurru config check --config "$conf" || fail "kudurru config check rejects the sample configuration"
check "kudurru config check --config $conf"

# Needs no running systemd: it parses the unit, checks its directives and that ExecStart and
# the Documentation= man pages exist.
systemd-analyze verify "$unit" || fail "systemd-analyze verify $unit"
check "systemd-analyze verify $unit"

# Two loopback ports free for UDP and TCP (the DNS listener; ops), and one nobody listens on
# for an upstream, so nothing is forwarded off this machine.
read -r port ops_port upstream_port < <(python3 - <<'EOF'
import socket
ports = []
while len(ports) < 3:
    t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    t.bind(("127.0.0.1", 0))
    p = t.getsockname()[1]
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        u.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        u.close()
        t.close()
    if p not in ports:
        ports.append(p)
print(*ports)
EOF
)
# `kudurru serve` on the sample file as installed, with this test's ports (flags override the
# file) and data directory; the DNS listener on 127.0.0.1:$1.
serve_args() {
    args=(serve --config "$conf" --cores 1 --listen "127.0.0.1:$1"
        --ops-address "127.0.0.1:$ops_port" --api-address "" --data-dir "$scratch/data"
        --upstream "udp://127.0.0.1:$upstream_port")
}
serve_args "$port"

# Waits for an answer from 127.0.0.1:$1, then checks `localhost A` is 127.0.0.1.
answers_localhost() {
    local answer=""
    for _ in $(seq 1 100); do
        answer=$(dig @127.0.0.1 -p "$1" +short +time=1 +tries=1 localhost A 2>/dev/null) && break
        sleep 0.1
    done
    [ "$answer" = 127.0.0.1 ] ||
        fail "dig @127.0.0.1 -p $1 localhost answered '$answer'; kudurru's log: $(cat "$scratch/serve.log")"
}

# Sends SIGTERM to $server and checks it exits 0 within 15 s.
stops_cleanly() {
    kill -TERM "$server"
    local code=0
    for _ in $(seq 1 150); do
        kill -0 "$server" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$server" 2>/dev/null && fail "kudurru serve did not exit within 15 s of SIGTERM"
    wait "$server" || code=$?
    server=""
    [ "$code" = 0 ] || fail "kudurru serve exited $code after SIGTERM (log: $(cat "$scratch/serve.log"))"
}

/usr/bin/kudurru "${args[@]}" 2>"$scratch/serve.log" &
server=$!
answers_localhost "$port"
check "kudurru serve from the package answers: dig @127.0.0.1 -p $port localhost = 127.0.0.1"
stops_cleanly
check "SIGTERM: exit 0"

# The system calls the server makes, serving and stopping, against the unit's filter (a call
# outside it would fail with EPERM under systemd). The filter's groups expand recursively.
expand() {
    systemd-analyze syscall-filter "$1" | awk 'NR > 1 && $1 !~ /^#/ && NF { print $1 }' |
        while read -r entry; do
            case "$entry" in
            @*) expand "$entry" ;;
            *) echo "$entry" ;;
            esac
        done
}
filter=$(sed -n 's/^SystemCallFilter=//p' "$unit")
for entry in $filter; do
    case "$entry" in
    @*) expand "$entry" ;;
    *) echo "$entry" ;;
    esac
done | sort -u >"$scratch/allowed"
strace -f -qq -c -o "$scratch/strace" /usr/bin/kudurru "${args[@]}" 2>"$scratch/serve.log" &
server=$!
answers_localhost "$port"
dig @127.0.0.1 -p "$port" +tcp +short localhost A >/dev/null
# SIGTERM to the traced server, not to strace (which would detach and exit).
traced=$(ps -o pid= --ppid "$server" | tr -d ' ')
kill -TERM "$traced"
wait "$server" || fail "kudurru serve under strace exited $? after SIGTERM"
server=""
awk 'NR > 2 && $NF != "total" && $NF !~ /^-/ { print $NF }' "$scratch/strace" | sort -u >"$scratch/used"
grep -qx io_uring_enter "$scratch/used" || fail "the trace saw no io_uring_enter: $(tr '\n' ' ' <"$scratch/used")"
outside=$(comm -23 "$scratch/used" "$scratch/allowed")
[ -z "$outside" ] || fail "system calls outside the unit's SystemCallFilter: $outside"
check "all $(wc -l <"$scratch/used") system calls the server made are in the unit's SystemCallFilter"

# The unit's privileges without systemd: an unprivileged user, no capability but
# CAP_NET_BIND_SERVICE (ambient), no new privileges, LimitMEMLOCK, on port 53 of 127.0.0.1
# when it is free here.
memlock=$(sed -n 's/^LimitMEMLOCK=//p' "$unit")
if ss -Hlun 'sport = :53' | grep -q . || ss -Hltn 'sport = :53' | grep -q .; then
    dns_port=$port
    echo "test-deb: port 53 is in use here; the unprivileged run uses $port"
else
    dns_port=53
fi
serve_args "$dns_port"
mkdir -m 0700 "$scratch/data" 2>/dev/null || true
chown -R nobody:nogroup "$scratch/data"
chmod 0755 "$scratch"
limit=(prlimit --memlock="$(numfmt --from=iec "$memlock")")
if ! "${limit[@]}" true 2>/dev/null; then
    # Raising the hard limit needs CAP_SYS_RESOURCE, which a container may not have.
    memlock="$(ulimit -Hl) KiB (this machine's hard limit; the unit's $memlock cannot be set here)"
    limit=()
fi
"${limit[@]}" setpriv --reuid=nobody --regid=nogroup --clear-groups --no-new-privs \
    --inh-caps=-all,+net_bind_service --ambient-caps=-all,+net_bind_service \
    --bounding-set=-all,+net_bind_service \
    /usr/bin/kudurru "${args[@]}" 2>"$scratch/serve.log" &
server=$!
answers_localhost "$dns_port"
check "as nobody with only CAP_NET_BIND_SERVICE and memlock $memlock: answers on 127.0.0.1:$dns_port"
stops_cleanly
check "SIGTERM: exit 0"

zcat /usr/share/man/man1/kudurru.1.gz | grep -q '^\.TH kudurru 1' || fail "kudurru.1.gz is not a man page"
man -l /usr/share/man/man1/kudurru-serve.1.gz 2>/dev/null | grep -q -- '--config' ||
    fail "man kudurru-serve does not show --config"
check "man pages: $(ls /usr/share/man/man1/kudurru*.1.gz | wc -l) in /usr/share/man/man1"
bash -c 'source /usr/share/bash-completion/completions/kudurru && complete -p kudurru' >/dev/null ||
    fail "the bash completion does not load"
[ -s /usr/share/zsh/vendor-completions/_kudurru ] && [ -s /usr/share/fish/vendor_completions.d/kudurru.fish ] ||
    fail "zsh or fish completion missing"
check "completions: bash loads; zsh and fish present"
echo "test-deb: all checks passed"
