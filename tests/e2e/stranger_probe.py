"""A stranger's pod calls every port of a running task runtime job (tests/e2e/tasks_test.sh).

Arguments: TARGET... where TARGET is POD=IP:PORT:WHERE, the ports the test found listening in
each of the job's pods' network namespace (/proc/PID/net/tcp), WHERE "any" (bound to every
address or the pod's) or "loopback" (bound to 127.0.0.1 or ::1 only).

For each it prints one line: "RESULT POD IP:PORT KIND VERDICT DETAIL", VERDICT "ok" when the
port refused the stranger as docs/security.md says it must, "FAIL" otherwise, where KIND is
  unreachable  a loopback port: a connection from another pod must not even open;
  http         an HTTP server: the hand-off (GET /v1/cluster) and the liveness ping (POST
               /v1/alive) refused (403), what else it serves read-only (/metrics, /healthz,
               /readyz: any answer) or unknown (404);
  grpc         a gRPC server: a call without the token, with a wrong one, and an 8 MiB one
               without a token all end UNAUTHENTICATED (refused before the read, so the
               method named does not matter: it exists nowhere);
  tls          a TLS server: the handshake without a client certificate of the job's CA
               fails, so nothing the stranger sends is read.
Anything else (a port that answers a stranger in any other way) is a FAIL, named.
"""

import socket
import ssl
import sys

import grpc

TIMEOUT = 5.0
METHOD = "/cohort.stranger.Probe/Anything"


def http_status(ip, port, method, path):
    """The status code of one HTTP/1.1 request, or None when the answer is not HTTP/1."""
    with socket.create_connection((ip, port), timeout=TIMEOUT) as s:
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: {ip}\r\nContent-Length: 0\r\n"
                  "Connection: close\r\n\r\n".encode())
        data = b""
        try:
            while b"\r\n" not in data and len(data) < 4096:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        except (ConnectionResetError, socket.timeout):
            pass
    if not data.startswith(b"HTTP/1."):
        return None
    return int(data.split(b" ", 2)[1])


def grpc_code(ip, port, metadata, size):
    channel = grpc.insecure_channel(f"{ip}:{port}")
    call = channel.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
    try:
        call(b"\x01" * size, timeout=TIMEOUT, metadata=metadata)
        return "OK"
    except grpc.RpcError as e:
        return e.code().name
    finally:
        channel.close()


def tls_refused(ip, port):
    """Whether a TLS server refuses a client that has no certificate ("" when it did, else why not)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    try:
        with socket.create_connection((ip, port), timeout=TIMEOUT) as raw:
            with context.wrap_socket(raw) as s:
                # TLS 1.3 ends the client's side of the handshake before the server has checked
                # the client's certificate: the refusal comes with the first read.
                s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
                data = s.recv(1)
                if data:
                    return "the server answered a client without a certificate"
                return ""
    except ssl.SSLError as e:
        return "" if "CERTIFICATE" in str(e).upper() or "HANDSHAKE" in str(e).upper() else f"TLS error {e}"
    except (ConnectionResetError, BrokenPipeError):
        return ""
    except OSError as e:
        return f"not TLS either: {e}"


def probe(pod, ip, port, where):
    if where == "loopback":
        try:
            socket.create_connection((ip, port), timeout=TIMEOUT).close()
            return "unreachable", "FAIL", "a port bound to the pod's loopback opened from another pod"
        except OSError as e:
            return "unreachable", "ok", type(e).__name__
    try:
        status = http_status(ip, port, "GET", "/v1/cluster")
    except OSError as e:
        return "?", "FAIL", f"cannot connect: {e}"
    if status is not None:
        codes = {
            "GET /v1/cluster": status,
            "POST /v1/alive": http_status(ip, port, "POST", "/v1/alive"),
            "GET /v1/unknown": http_status(ip, port, "GET", "/v1/unknown"),
        }
        for path in ("/metrics", "/healthz", "/readyz"):
            codes[f"GET {path}"] = http_status(ip, port, "GET", path)
        detail = ", ".join(f"{k} {v}" for k, v in codes.items())
        refused = codes["GET /v1/cluster"] in (403, 404) and codes["POST /v1/alive"] in (403, 404) \
            and codes["GET /v1/unknown"] in (403, 404)
        # A port that serves the hand-off must be the sidecar's: then it must refuse it (403).
        return "http", "ok" if refused else "FAIL", detail
    codes = {
        "no token": grpc_code(ip, port, None, 16),
        "a wrong token": grpc_code(ip, port, (("authorization", "Bearer not-the-job-token"),), 16),
        "8 MiB, no token": grpc_code(ip, port, None, 8 << 20),
    }
    if all(c == "UNAUTHENTICATED" for c in codes.values()):
        return "grpc", "ok", "UNAUTHENTICATED " + ", ".join(codes)
    if all(c == "UNAVAILABLE" for c in codes.values()):
        why = tls_refused(ip, port)
        if not why:
            return "tls", "ok", "the handshake without a client certificate was refused"
        return "tls", "FAIL", why
    return "grpc", "FAIL", ", ".join(f"{k}: {v}" for k, v in codes.items())


def main(targets):
    if not targets:
        print("stranger_probe: no targets", flush=True)
        return 2
    failed = 0
    for target in targets:
        pod, rest = target.split("=", 1)
        ip, port, where = rest.rsplit(":", 2)
        kind, verdict, detail = probe(pod, ip, int(port), where)
        failed += verdict != "ok"
        print(f"RESULT {pod} {ip}:{port} {kind} {verdict} {detail}", flush=True)
    print(f"stranger_probe: {len(targets)} ports, {failed} answered the stranger", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
