#!/usr/bin/env bash
# The Debian package, for real: builds it with cargo-deb, installs it with dpkg, checks what it
# installs (the warren system user, /var/lib/warren, the conffile /etc/warren/warren.toml, the
# unit, which `systemd-analyze verify` must pass without a word), starts the installed binary as
# the unit would (its ExecStart, as user warren, its open-files limit and umask, a clean
# environment) on free ports, has pika declare a queue, publish and get the message back, checks
# the data went to /var/lib/warren, stops the broker, reinstalls the package over an edited
# configuration, then removes (`dpkg -r`) and purges (`dpkg -P`) it. Prints each check; exits
# non-zero on the first that fails.
#
# Run as root on a machine without a warren installation (CI's is fresh). It installs what is
# missing: cargo-deb, and Debian's systemd (for systemd-analyze) and adduser. The package holds
# target/release/warren when it exists (it is not rebuilt, even if older than the sources: a
# note says so), else target/debug/warren, which CI's scripts/test.sh has just built (a release
# build would cost minutes), else a release build cargo-deb makes.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_DEB_VERSION=3.8.0
PACKAGE=warren
WARREN_USER=warren
DATA_DIR=/var/lib/warren
CONFIG=/etc/warren/warren.toml
UNIT=/usr/lib/systemd/system/warren.service
BINARY=/usr/bin/warren
# The modes postinst gives (octal, as `stat -c %a` prints them).
DATA_DIR_MODE=750
CONFIG_MODE=640
# Debian's system users are below this uid (adduser.conf's LAST_SYSTEM_UID is 999).
FIRST_NORMAL_UID=1000
# How long the broker may take to open its listener, and to stop, in tenths of a second.
START_TENTHS=300
STOP_TENTHS=300
QUEUE=check-package
# The most exposure `systemd-analyze security` may rate the unit, in tenths (warren.service is
# at 1.4 of 10: a hardening line lost fails the check).
MAX_EXPOSURE_TENTHS=20
started=$SECONDS

check() { echo "==> check-package: $*"; }
fail() {
  echo "check-package: FAILED: $*" >&2
  exit 1
}

[ "$(id -u)" = 0 ] || fail "run as root: it installs a package and creates a system user"
command -v dpkg >/dev/null || fail "dpkg is missing: this needs a Debian or Ubuntu machine"
# A real installation is never touched: the cleanup below deletes the user and the data.
if dpkg-query -W "$PACKAGE" >/dev/null 2>&1 && [ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$PACKAGE")" != "un " ]; then
  fail "the $PACKAGE package is installed here; this script installs and purges its own (dpkg -P $PACKAGE first)"
fi
getent passwd "$WARREN_USER" >/dev/null && fail "user $WARREN_USER exists (userdel $WARREN_USER first, if it is a leftover)"
[ -e "$DATA_DIR" ] && fail "$DATA_DIR exists (remove it first, if it is a leftover)"
[ -e /etc/warren ] && fail "/etc/warren exists (remove it first, if it is a leftover)"

work=$(mktemp -d)
broker=
cleanup() {
  local status=$?
  if [ -n "$broker" ] && kill -0 "$broker" 2>/dev/null; then
    kill -KILL "$broker" 2>/dev/null || true
    wait "$broker" 2>/dev/null || true
  fi
  # What the run made, and only that (the checks above refused to start beside anything else).
  dpkg -P "$PACKAGE" >/dev/null 2>&1 || true
  if getent passwd "$WARREN_USER" >/dev/null; then
    userdel "$WARREN_USER" 2>/dev/null || true
  fi
  getent group "$WARREN_USER" >/dev/null && { groupdel "$WARREN_USER" 2>/dev/null || true; }
  rm -rf "$DATA_DIR" /etc/warren "$work"
  if [ "$status" = 0 ]; then
    echo "==> check-package: passed in $((SECONDS - started)) s"
  else
    echo "==> check-package: failed after $((SECONDS - started)) s" >&2
  fi
}
trap cleanup EXIT

# ---- tools
apt_missing=()
command -v systemd-analyze >/dev/null || apt_missing+=(systemd)
command -v adduser >/dev/null || apt_missing+=(adduser)
if [ ${#apt_missing[@]} -gt 0 ]; then
  check "apt-get install ${apt_missing[*]}"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${apt_missing[@]}" >/dev/null
fi
if [ "$(cargo deb --version 2>/dev/null)" != "cargo-deb $CARGO_DEB_VERSION" ]; then
  check "cargo install cargo-deb --version $CARGO_DEB_VERSION (about 2 minutes)"
  nice -n 10 cargo install cargo-deb --version "$CARGO_DEB_VERSION" --locked --quiet
fi

# ---- build
if [ -x target/release/warren ]; then
  newer=$(find amqp/src delivery/src storage/src server/src webui/src webui/static -newer target/release/warren -type f -print -quit)
  [ -z "$newer" ] || echo "note: $newer is newer than target/release/warren, which is packaged as it is"
  check "cargo deb (target/release/warren, not rebuilt)"
  cargo deb -p warren-server --no-build --quiet --output "$work" >/dev/null
elif [ -x target/debug/warren ]; then
  check "cargo deb --profile dev (target/debug/warren: no release build here)"
  cargo deb -p warren-server --profile dev --no-build --quiet --output "$work" >/dev/null
else
  check "cargo deb (building the release binary)"
  nice -n 10 cargo deb -p warren-server --locked --quiet --output "$work" >/dev/null
fi
deb=$(find "$work" -maxdepth 1 -name "${PACKAGE}_*.deb" -print -quit)
[ -n "$deb" ] || fail "cargo deb made no ${PACKAGE}_*.deb"
check "built $(basename "$deb") ($(du -h "$deb" | cut -f1))"

# ---- install
check "dpkg -i"
dpkg -i "$deb" >"$work/dpkg-install.log" 2>&1 || {
  cat "$work/dpkg-install.log" >&2
  fail "dpkg -i"
}
[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$PACKAGE")" = "ii " ] || fail "$PACKAGE is not installed after dpkg -i"

IFS=: read -r _ _ uid gid _ home shell < <(getent passwd "$WARREN_USER") || fail "no user $WARREN_USER"
[ "$uid" -lt "$FIRST_NORMAL_UID" ] || fail "$WARREN_USER has uid $uid, not a system uid"
[ "$(getent group "$WARREN_USER" | cut -d: -f3)" = "$gid" ] || fail "$WARREN_USER's primary group is not the group $WARREN_USER"
[ "$home" = "$DATA_DIR" ] || fail "$WARREN_USER's home is $home, not $DATA_DIR"
case "$shell" in */nologin | */false) ;; *) fail "$WARREN_USER may log in (shell $shell)" ;; esac
check "user $WARREN_USER: system uid $uid, group $WARREN_USER, home $home, shell $shell"

owner_mode() { stat -c '%U:%G %a' "$1"; }
[ "$(owner_mode "$DATA_DIR")" = "$WARREN_USER:$WARREN_USER $DATA_DIR_MODE" ] ||
  fail "$DATA_DIR is $(owner_mode "$DATA_DIR"), not $WARREN_USER:$WARREN_USER $DATA_DIR_MODE"
check "$DATA_DIR: $(owner_mode "$DATA_DIR")"
[ "$(owner_mode "$CONFIG")" = "root:$WARREN_USER $CONFIG_MODE" ] ||
  fail "$CONFIG is $(owner_mode "$CONFIG"), not root:$WARREN_USER $CONFIG_MODE"
# Captured, not piped: a `grep -q` that stops reading early would fail the pipe (pipefail).
conffiles=$(dpkg-query -W -f='${Conffiles}\n' "$PACKAGE")
grep -q "^ $CONFIG " <<<"$conffiles" || fail "$CONFIG is not a conffile of $PACKAGE"
cmp -s "$CONFIG" server/debian/warren.toml || fail "$CONFIG differs from server/debian/warren.toml"
check "$CONFIG: $(owner_mode "$CONFIG"), a conffile, as server/debian/warren.toml"
[ -x "$BINARY" ] || fail "$BINARY is missing"
help=$("$BINARY" --help)
grep -q 'warren ctl' <<<"$help" || fail "warren --help does not mention warren ctl"
check "$BINARY: --help mentions warren ctl"

# ---- the unit
[ -f "$UNIT" ] || fail "$UNIT is missing"
# verify exits 0 on some errors (an unknown Type= is only "ignoring"): its stderr must be empty.
set +e
systemd-analyze verify "$UNIT" >"$work/verify.out" 2>"$work/verify.err"
verify_status=$?
set -e
if [ "$verify_status" != 0 ] || [ -s "$work/verify.err" ] || [ -s "$work/verify.out" ]; then
  cat "$work/verify.out" "$work/verify.err" >&2
  fail "systemd-analyze verify $UNIT: exit $verify_status"
fi
check "systemd-analyze verify $UNIT: exit 0, nothing said"
if ! systemd-analyze security --offline=yes --threshold="$MAX_EXPOSURE_TENTHS" "$UNIT" >"$work/security.out" 2>&1; then
  grep '✗' "$work/security.out" >&2 || cat "$work/security.out" >&2
  fail "systemd-analyze security rates $UNIT above $MAX_EXPOSURE_TENTHS tenths: $(tail -n 1 "$work/security.out")"
fi
check "systemd-analyze security: $(tail -n 1 "$work/security.out" | sed 's/^→ //')"

unit_value() { sed -n "s/^$1=//p" "$UNIT"; }
[ "$(unit_value ExecStart | wc -l)" = 1 ] || fail "$UNIT needs exactly one ExecStart="
read -r -a exec_start <<<"$(unit_value ExecStart)"
case "${exec_start[0]}" in /*) ;; *) fail "ExecStart= starts with ${exec_start[0]}: a prefix this script does not model" ;; esac
[ "$(unit_value User)" = "$WARREN_USER" ] && [ "$(unit_value Group)" = "$WARREN_USER" ] ||
  fail "$UNIT does not run as $WARREN_USER:$WARREN_USER"
nofile=$(unit_value LimitNOFILE)
[[ "$nofile" =~ ^[0-9]+$ ]] || fail "LimitNOFILE=$nofile is not a number"
umask_value=$(unit_value UMask)
check "ExecStart=${exec_start[*]} (User=$WARREN_USER, LimitNOFILE=$nofile, UMask=$umask_value)"

# ---- run it as the unit would, on free ports
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
amqp=$(free_port)
http=$(free_port)
# systemd sets LimitNOFILE= as both limits; raising the hard one needs CAP_SYS_RESOURCE, which a
# container may lack: the broker then runs with the hard limit there is.
limit=$nofile
if ! (ulimit -n "$nofile") 2>/dev/null; then
  limit=$(ulimit -Hn)
  echo "note: the open-files limit cannot be raised to $nofile here (no CAP_SYS_RESOURCE): the broker runs with $limit"
fi
# systemd starts a User= service in /, with the unit's limit and umask and only its own
# environment; flags after ExecStart's beat the installed file's listeners.
(
  cd /
  ulimit -n "$limit"
  umask "$umask_value"
  exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$DATA_DIR" LANG=C.UTF-8 \
    setpriv --reuid="$WARREN_USER" --regid="$WARREN_USER" --init-groups \
    "${exec_start[@]}" --amqp-listen "127.0.0.1:$amqp" --http-listen "127.0.0.1:$http"
) >"$work/warren.log" 2>&1 &
broker=$!
for _ in $(seq 1 "$START_TENTHS"); do
  (exec 3<>"/dev/tcp/127.0.0.1/$amqp") 2>/dev/null && break
  kill -0 "$broker" 2>/dev/null || {
    cat "$work/warren.log" >&2
    fail "the broker exited at start"
  }
  sleep 0.1
done
(exec 3<>"/dev/tcp/127.0.0.1/$amqp") 2>/dev/null || {
  cat "$work/warren.log" >&2
  fail "the broker did not open 127.0.0.1:$amqp"
}
[ "$(ps -o user= -p "$broker" | tr -d ' ')" = "$WARREN_USER" ] || fail "the broker does not run as $WARREN_USER"
grep -q "open files limit.*now=$limit" "$work/warren.log" || {
  cat "$work/warren.log" >&2
  fail "the broker did not report the open-files limit $limit"
}
check "broker pid $broker runs as $WARREN_USER on 127.0.0.1:$amqp (HTTP $http), open files limit $limit"

venv=tests/python/.venv
if ! "$venv/bin/python" -c 'import pika' 2>/dev/null; then
  venv="$work/venv"
  check "pika into a temporary venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "$(grep -i '^pika==' tests/python/requirements.txt)"
fi
"$venv/bin/python" - "$amqp" "$QUEUE" <<'EOF' || fail "the pika round trip"
import sys
import pika

port, queue = int(sys.argv[1]), sys.argv[2]
body = b"through the package"
conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port, connection_attempts=3))
ch = conn.channel()
ch.confirm_delivery()
ch.queue_declare(queue, durable=True)
# Persistent and confirmed: the message is in the durable queue's log on disk.
ch.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2), mandatory=True)
method, _props, got = ch.basic_get(queue, auto_ack=False)
assert method is not None, "basic.get found the queue empty"
assert got == body, f"basic.get returned {got!r}"
ch.basic_ack(method.delivery_tag)
conn.close()
print(f"==> check-package: pika declared {queue}, published a persistent message with a confirm, got it back")
EOF

# The durable queue and the definitions are in the data directory, written by the broker.
grep -rqs "$QUEUE" "$DATA_DIR" || fail "no file under $DATA_DIR names the queue $QUEUE"
foreign=$(find "$DATA_DIR" ! -user "$WARREN_USER" -print -quit)
[ -z "$foreign" ] || fail "$foreign is not $WARREN_USER's"
readable=$(find "$DATA_DIR" -perm -o=r -print -quit)
[ -z "$readable" ] || fail "$readable is readable by other users"
check "$DATA_DIR holds the queue: $(find "$DATA_DIR" -type f | wc -l) files, all $WARREN_USER's, none world-readable"

kill -TERM "$broker"
for _ in $(seq 1 "$STOP_TENTHS"); do
  kill -0 "$broker" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$broker" 2>/dev/null && fail "the broker did not stop within $((STOP_TENTHS / 10)) s of SIGTERM"
set +e
wait "$broker"
stop_status=$?
set -e
broker=
[ "$stop_status" = 0 ] || {
  cat "$work/warren.log" >&2
  fail "the broker exited with $stop_status on SIGTERM"
}
check "SIGTERM: the broker stopped, exit 0"

# ---- upgrade (a reinstall takes the same path), removal, purge
edit="# edited by check-package"
echo "$edit" >>"$CONFIG"
dpkg -i "$deb" >"$work/dpkg-reinstall.log" 2>&1 || {
  cat "$work/dpkg-reinstall.log" >&2
  fail "dpkg -i over the installed package"
}
grep -qx "$edit" "$CONFIG" || fail "reinstalling replaced the edited $CONFIG"
[ "$(owner_mode "$CONFIG")" = "root:$WARREN_USER $CONFIG_MODE" ] || fail "reinstalling left $CONFIG $(owner_mode "$CONFIG")"
grep -rqs "$QUEUE" "$DATA_DIR" || fail "reinstalling lost the data in $DATA_DIR"
[ "$(getent passwd "$WARREN_USER" | cut -d: -f3)" = "$uid" ] || fail "reinstalling changed $WARREN_USER's uid"
check "dpkg -i again: the edited $CONFIG, the data and uid $uid kept"

dpkg -r "$PACKAGE" >"$work/dpkg-remove.log" 2>&1 || {
  cat "$work/dpkg-remove.log" >&2
  fail "dpkg -r"
}
[ ! -e "$BINARY" ] || fail "$BINARY is still there after dpkg -r"
[ ! -e "$UNIT" ] || fail "$UNIT is still there after dpkg -r"
grep -qx "$edit" "$CONFIG" || fail "dpkg -r removed or replaced the conffile $CONFIG"
[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$PACKAGE")" = "rc " ] || fail "$PACKAGE is not in state rc after dpkg -r"
check "dpkg -r: binary and unit gone, $CONFIG kept (state rc)"

dpkg -P "$PACKAGE" >"$work/dpkg-purge.log" 2>&1 || {
  cat "$work/dpkg-purge.log" >&2
  fail "dpkg -P"
}
[ ! -e "$CONFIG" ] || fail "$CONFIG is still there after dpkg -P"
if dpkg-query -W "$PACKAGE" >/dev/null 2>&1; then
  [ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$PACKAGE")" = "un " ] || fail "dpkg still knows $PACKAGE after dpkg -P"
fi
[ -d "$DATA_DIR" ] && getent passwd "$WARREN_USER" >/dev/null || fail "dpkg -P removed $DATA_DIR or the user"
check "dpkg -P: $CONFIG gone; $DATA_DIR and user $WARREN_USER kept, as postinst says"
