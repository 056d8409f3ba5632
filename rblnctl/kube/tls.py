"""Why the API server's certificate was refused, said as kubectl (Go's crypto/x509) says it.

OpenSSL's "certificate verify failed" names no cause a user can act on. kubectl says, for the same URL, what the
certificate is valid for (`x509: certificate is valid for localhost, 127.0.0.1, not 192.0.2.2`; `cannot validate
certificate for 192.0.2.2 because it doesn't contain any IP SANs`), that its authority is unknown, or when it
expired (Go crypto/x509 verify.go: HostnameError.Error, UnknownAuthorityError, CertificateInvalidError Expired).

The handshake that failed does not hand the certificate over, so on that error path only, rblnctl opens one more
connection to the same address, through the same proxy, with verification off, reads the certificate the server
presents and closes the connection: no HTTP request is sent, no credential and no client certificate.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import ssl
import tempfile
from dataclasses import dataclass
from typing import Any

from rblnctl.kube.replies import causes

log = logging.getLogger(__name__)

# OpenSSL's X509_V_ERR_* codes (include/openssl/x509_vfy.h), as ssl.SSLCertVerificationError.verify_code.
NOT_YET_VALID = 9
EXPIRED = 10
SELF_SIGNED = 18
SELF_SIGNED_IN_CHAIN = 19
NO_LOCAL_ISSUER = 20
UNABLE_TO_VERIFY_LEAF = 21
HOSTNAME_MISMATCH = 62
IP_MISMATCH = 64
UNKNOWN_AUTHORITY = frozenset({SELF_SIGNED, SELF_SIGNED_IN_CHAIN, NO_LOCAL_ISSUER, UNABLE_TO_VERIFY_LEAF, 2})


@dataclass(frozen=True)
class Certificate:
    """What a message needs of the server's certificate."""

    dns_names: tuple[str, ...] = ()
    ips: tuple[str, ...] = ()
    common_name: str = ""
    issuer: str = ""
    not_before: str = ""
    not_after: str = ""


def verify_error(e: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate verification failure inside a urllib3 error, if that is what it is."""
    return next((err for err in causes(e) if isinstance(err, ssl.SSLCertVerificationError)), None)


def explain(err: ssl.SSLCertVerificationError, name: str, cert: Certificate | None) -> str:
    """One clause: why the certificate was refused for `name` (the host, or the kubeconfig's tls-server-name)."""
    code = getattr(err, "verify_code", None)
    raw = str(getattr(err, "verify_message", "") or "certificate verify failed")
    if code in (HOSTNAME_MISMATCH, IP_MISMATCH):
        # Go's HostnameError.Error (crypto/x509 verify.go): an IP is checked against the IP SANs only, a name
        # against the DNS SANs only; the other kind is added here, as a hint.
        if cert is None:
            return f"the server's certificate is not valid for {name} ({raw})"
        if _is_ip(name):
            if not cert.ips:
                return (f"the server's certificate is not valid for {name}: it has no IP SANs"
                        + (f" (its DNS names: {', '.join(cert.dns_names)})" if cert.dns_names else ""))
            return f"the server's certificate is valid for {', '.join(cert.ips)}, not {name}" + (
                f" (its DNS names: {', '.join(cert.dns_names)})" if cert.dns_names else "")
        if not cert.dns_names:
            return f"the server's certificate is not valid for any name, but {name} was asked for" + (
                f" (its IP SANs: {', '.join(cert.ips)})" if cert.ips else "")
        return f"the server's certificate is valid for {', '.join(cert.dns_names)}, not {name}" + (
            f" (its IP SANs: {', '.join(cert.ips)})" if cert.ips else "")
    if code in UNKNOWN_AUTHORITY:
        by = f" (issued by {cert.issuer})" if cert is not None and cert.issuer else ""
        return (f"the server's certificate is signed by an unknown authority{by}: {raw}; pass --certificate-authority "
                "or set the cluster's certificate-authority in the kubeconfig")
    if code == EXPIRED:
        when = f" on {cert.not_after}" if cert is not None and cert.not_after else ""
        return f"the server's certificate expired{when}"
    if code == NOT_YET_VALID:
        when = f" before {cert.not_before}" if cert is not None and cert.not_before else " yet"
        return f"the server's certificate is not valid{when}"
    return f"the server's certificate was refused: {raw}"


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.strip("[]"))
        return True
    except ValueError:
        return False


def decode(der: bytes) -> Certificate | None:
    """The names, issuer and validity of a DER certificate (CPython's own decoder); None when it cannot."""
    decoder: Any = getattr(getattr(ssl, "_ssl", None), "_test_decode_cert", None)
    if decoder is None:
        return None
    fd, path = tempfile.mkstemp(prefix="rblnctl-peer-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(ssl.DER_cert_to_PEM_cert(der))
        info = decoder(path)
    except (OSError, ValueError, ssl.SSLError) as e:
        log.debug("cannot decode the server's certificate: %s", e)
        return None
    finally:
        os.unlink(path)
    sans = info.get("subjectAltName") or ()
    return Certificate(
        dns_names=tuple(v for k, v in sans if k == "DNS"),
        ips=tuple(_ip_text(v) for k, v in sans if k == "IP Address"),
        common_name=_attr(info.get("subject"), "commonName"),
        issuer=_attr(info.get("issuer"), "commonName", prefix="CN="),
        not_before=str(info.get("notBefore") or ""),
        not_after=str(info.get("notAfter") or ""),
    )


def _attr(rdns: Any, key: str, *, prefix: str = "") -> str:
    for rdn in rdns or ():
        for k, v in rdn:
            if k == key:
                return f"{prefix}{v}"
    return ""


def _ip_text(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value.strip()))  # OpenSSL writes IPv6 SANs in full: shorten them as Go does
    except ValueError:
        return value.strip()
