"""vllm_ready asking the API as a client through the proxy: https checked against
a given CA, the key sent on every route but /health. A local TLS server with a CA
made here stands in for the proxy."""

from __future__ import annotations

import datetime
import http.server
import ipaddress
import json
import os
import re
import ssl
import threading

import pytest
from ansible_collections.vllmops.cluster.plugins.modules.vllm_ready import Refused, answers, newest_write
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KEY = "sandbox-key-0123456789"


def _certificate(subject, issuer, public_key, signing_key, ca: bool, names=()):
    # The extensions Python's strict verification (3.13) wants, as community.crypto writes them for the role.
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                                        critical=True)
    else:
        builder = (builder.add_extension(x509.SubjectAlternativeName(list(names)), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signing_key.public_key()),
                                  critical=False)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False))
    return builder.sign(signing_key, hashes.SHA256())


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, and a server certificate for 127.0.0.1 it signed (as the api_proxy role makes them)."""
    tmp = tmp_path_factory.mktemp("pki")
    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    ca = _certificate(ca_name, ca_name, ca_key.public_key(), ca_key, ca=True)
    server = _certificate(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "head")]), ca_name,
                          server_key.public_key(), ca_key, ca=False,
                          names=[x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    (tmp / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (tmp / "server.pem").write_bytes(server.public_bytes(serialization.Encoding.PEM) + server_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return tmp


@pytest.fixture
def proxy(pki):
    """An https API that, like the proxy, wants the key on every route but /health; records what it was sent."""
    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append((self.path, self.headers.get("Authorization")))
            if self.path != "/health" and self.headers.get("Authorization") != f"Bearer {KEY}":
                payload, status = b'{"error": "key"}', 401
            elif self.path == "/v1/models":
                payload, status = json.dumps({"data": [{"id": "tiny"}]}).encode(), 200
            elif self.path == "/v1/completions":
                assert json.loads(body)["model"] == "tiny"
                payload, status = json.dumps({"choices": [{"text": "hi"}]}).encode(), 200
            elif self.path == "/v1/chat/completions":
                request = json.loads(body)
                assert request["tools"][0]["function"]["name"] and request["tool_choice"] == "auto"
                payload, status = json.dumps(CHAT["reply"]).encode(), CHAT["status"]
            elif self.path == "/v1/embeddings":
                payload, status = json.dumps({"data": [{"embedding": [0.1, -0.2]}]}).encode(), 200
            else:
                payload, status = b"{}", 200
            self.send_response(status)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = _answer

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki / "server.pem")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def params(url, **overrides):
    return {"url": url, "api_key": KEY, "served_model_name": "tiny", "ca_path": None, "validate_certs": True,
            "task": "generate", "tools": False, **overrides}


# What the fake server answers a chat request with tools.
CHAT = {"status": 200, "reply": {}}


def test_ready_through_the_proxy_with_its_ca_and_the_key_on_every_route_but_health(proxy, pki):
    url, seen = proxy
    assert answers(None, params(url, ca_path=str(pki / "ca.crt"))) == (True, "")
    assert seen == [("/health", None), ("/v1/models", f"Bearer {KEY}"), ("/v1/completions", f"Bearer {KEY}")]


@pytest.mark.parametrize("reply", [
    {"choices": [{"message": {"role": "assistant", "content": "It is sunny."}, "finish_reason": "stop"}]},
    {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        "finish_reason": "tool_calls"}]},
])
def test_a_server_with_a_tool_parser_is_ready_once_it_answers_a_request_with_tools_in_the_protocols_shape(proxy, pki, reply):
    url, seen = proxy
    CHAT.update(status=200, reply=reply)
    assert answers(None, params(url, ca_path=str(pki / "ca.crt"), tools=True)) == (True, "")
    assert seen[-1] == ("/v1/chat/completions", f"Bearer {KEY}")


@pytest.mark.parametrize(("status", "reply", "said"), [
    (400, {"object": "error", "message": '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'},
     "HTTP 400: "),
    (200, {"choices": [{"message": {"content": None, "tool_calls": [{"function": {"name": "get_weather", "arguments": {}}}]}}]},
     "a tool call is not a function with a name and string arguments"),
    (200, {"choices": []}, "the reply has no choices"),
])
def test_a_refused_or_misshapen_answer_to_tools_fails_at_once(proxy, pki, status, reply, said):
    url, _seen = proxy
    CHAT.update(status=status, reply=reply)
    with pytest.raises(Refused, match=re.escape(said)):
        answers(None, params(url, ca_path=str(pki / "ca.crt"), tools=True))


def test_an_embedding_model_is_ready_once_it_embeds(proxy, pki):
    url, seen = proxy
    assert answers(None, params(url, ca_path=str(pki / "ca.crt"), task="embed")) == (True, "")
    assert seen[-1] == ("/v1/embeddings", f"Bearer {KEY}") and ("/v1/completions", f"Bearer {KEY}") not in seen


def test_a_certificate_the_ca_did_not_sign_is_not_ready(proxy):
    url, seen = proxy
    ready, why = answers(None, params(url))  # the system's trust store does not know the test CA
    assert not ready and "CERTIFICATE_VERIFY_FAILED" in why
    assert seen == []  # nothing was sent, not even /health


def test_a_wrong_key_is_not_ready(proxy, pki):
    url, _seen = proxy
    ready, why = answers(None, params(url, ca_path=str(pki / "ca.crt"), api_key="wrong-key-0123456789"))
    assert not ready and "401" in why


def test_a_file_written_under_the_caches_is_progress(tmp_path):
    """A compile that logs nothing but fills its cache is not a hang (vllm_ready's progress_paths)."""
    def settle(*files):
        for path, when in files:
            os.utime(path, (when, when))
        for folder in (tmp_path / "inductor" / "fx", tmp_path / "inductor", tmp_path):
            os.utime(folder, (900, 900))

    assert newest_write([str(tmp_path / "missing")]) == 0.0
    (tmp_path / "inductor" / "fx").mkdir(parents=True)
    kernel = tmp_path / "inductor" / "fx" / "k.py"
    kernel.write_text("compiled")
    settle((kernel, 1000))
    assert newest_write([str(tmp_path)]) == 1000
    later = tmp_path / "inductor" / "fx" / "k2.py"
    later.write_text("more")
    settle((later, 2000))
    assert newest_write([str(tmp_path)]) == 2000
