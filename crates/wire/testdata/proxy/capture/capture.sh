#!/usr/bin/env bash
# Re-captures the PROXY headers in crates/wire/testdata/proxy/ from real
# senders: HAProxy (send-proxy, send-proxy-v2 with TLVs, health checks) and
# nginx stream (proxy_protocol on). See ../README.md for what each file is.
#
#   crates/wire/testdata/proxy/capture/capture.sh [WORKDIR]
#
# Needs haproxy, nginx (with ngx_stream_module), openssl and python3; uses
# 127.0.0.1 and ::1 ports 18401-18413 and 18501-18513.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=$(cd "$here/.." && pwd)
work=${1:-$(mktemp -d)}
mkdir -p "$work"
cd "$work"

# --- certificates: a CA, a server certificate, a client certificate -------
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 3650 \
    -subj "/CN=apiway test CA" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr \
    -subj "/CN=api.a.example.com" 2>/dev/null
printf "subjectAltName=DNS:api.a.example.com\n" >san.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
    -out server.crt -days 3650 -extfile san.ext 2>/dev/null
cat server.crt server.key >server.pem
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout client.key -out client.csr \
    -subj "/O=system:nodes/CN=system:node:worker-1" 2>/dev/null
openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
    -out client.crt -days 3650 2>/dev/null

# --- HAProxy 2.6 -----------------------------------------------------------
cat >haproxy.cfg <<EOF
global
    log stderr format short local0 info

defaults
    mode tcp
    log global
    timeout connect 5s
    timeout client 10s
    timeout server 10s
    unique-id-format %{+X}o\ %ci:%cp_%fi:%fp_%Ts_%rt:%pid

frontend v2_tcp4
    bind 127.0.0.1:18401
    default_backend v2_tcp4
backend v2_tcp4
    server s 127.0.0.1:18501 send-proxy-v2 proxy-v2-options crc32c,unique-id

frontend v2_tls
    bind 127.0.0.1:18402 ssl crt $work/server.pem ca-file $work/ca.pem verify optional alpn h2,http/1.1
    default_backend v2_tls
backend v2_tls
    server s 127.0.0.1:18502 send-proxy-v2 proxy-v2-options ssl,cert-cn,ssl-cipher,cert-sig,cert-key,authority,crc32c,unique-id

frontend v2_tcp6
    bind [::1]:18403
    default_backend v2_tcp6
backend v2_tcp6
    server s [::1]:18503 send-proxy-v2 proxy-v2-options crc32c

frontend v1_tcp4
    bind 127.0.0.1:18404
    default_backend v1_tcp4
backend v1_tcp4
    server s 127.0.0.1:18504 send-proxy

frontend v1_tcp6
    bind [::1]:18405
    default_backend v1_tcp6
backend v1_tcp6
    server s [::1]:18505 send-proxy

frontend v1_mapped
    bind :::18406 v4v6
    default_backend v1_mapped
backend v1_mapped
    server s 127.0.0.1:18506 send-proxy

frontend v2_mapped
    bind :::18407 v4v6
    default_backend v2_mapped
backend v2_mapped
    server s 127.0.0.1:18507 send-proxy-v2 proxy-v2-options crc32c

backend v2_check
    option tcp-check
    server s 127.0.0.1:18508 send-proxy-v2 proxy-v2-options crc32c,unique-id check check-send-proxy inter 1h

frontend stacked_outer
    bind 127.0.0.1:18410
    default_backend stacked_outer
backend stacked_outer
    server s 127.0.0.1:18409 send-proxy
frontend stacked_inner
    bind 127.0.0.1:18409
    default_backend stacked_inner
backend stacked_inner
    server s 127.0.0.1:18509 send-proxy-v2 proxy-v2-options crc32c
EOF

# --- nginx 1.22 stream -------------------------------------------------------
mkdir -p nginx/logs
cat >nginx.conf <<EOF
load_module /usr/lib/nginx/modules/ngx_stream_module.so;
events {}
stream {
    server {
        listen 127.0.0.1:18412;
        proxy_pass 127.0.0.1:18512;
        proxy_protocol on;
    }
    server {
        listen [::1]:18413;
        proxy_pass [::1]:18513;
        proxy_protocol on;
    }
}
EOF

pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT

# capture NAME HOST PORT: starts a listener writing $out/NAME.bin.
capture() {
    python3 "$here/capture.py" "$2" "$3" "$out/$1.bin" >"$1.log" 2>&1 &
    pids+=($!)
    until grep -qs listening "$1.log"; do sleep 0.05; done
}

# send HOST PORT: connects, sends "ping\n", closes.
send() {
    python3 - "$1" "$2" <<'PY'
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
s.sendall(b"ping\n")
time.sleep(0.3)
s.close()
PY
}

capture haproxy-v2-tcp4-crc32c-unique-id 127.0.0.1 18501
capture haproxy-v2-tls-authority-ssl 127.0.0.1 18502
capture haproxy-v2-tcp6-crc32c ::1 18503
capture haproxy-v1-tcp4 127.0.0.1 18504
capture haproxy-v1-tcp6 ::1 18505
capture haproxy-v1-v4mapped 127.0.0.1 18506
capture haproxy-v2-v4mapped-crc32c 127.0.0.1 18507
capture haproxy-v2-local-health-check 127.0.0.1 18508
capture haproxy-stacked-v2-then-v1 127.0.0.1 18509
capture nginx-v1-tcp4 127.0.0.1 18512
capture nginx-v1-tcp6 ::1 18513

haproxy -f haproxy.cfg -db >haproxy.log 2>&1 &
pids+=($!)
nginx -p "$work/nginx" -c "$work/nginx.conf" -g "daemon off; pid $work/nginx/pid; error_log stderr;" \
    >nginx.log 2>&1 &
pids+=($!)
sleep 1

send 127.0.0.1 18401
printf 'ping\n' | openssl s_client -quiet -connect 127.0.0.1:18402 \
    -servername api.a.example.com -cert client.crt -key client.key -alpn h2 \
    -CAfile ca.pem >/dev/null 2>&1 || true
send ::1 18403
send 127.0.0.1 18404
send ::1 18405
send 127.0.0.1 18406
send 127.0.0.1 18407
send 127.0.0.1 18410
send 127.0.0.1 18412
send ::1 18413

sleep 6
cat ./*.log
