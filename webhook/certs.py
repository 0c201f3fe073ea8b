"""A self-signed CA and a serving certificate, made with ``cryptography``.

Layout is that of a Kubernetes TLS secret plus the CA: ``ca.crt``, ``tls.crt``,
``tls.key`` (and ``ca.key``, kept so the serving certificate can be renewed
under the same CA: webhook configurations keep working, no caBundle change).
Files are written atomically (temp file + rename), so a server reloading them
never reads half a key.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .seal import new_key_line

SigningKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | dsa.DSAPrivateKey  # signs with SHA-256

DEFAULT_NAMES = ("localhost", "127.0.0.1")
CA_DAYS = 3650
SERVING_DAYS = 365


@dataclass(frozen=True, slots=True)
class CertBundle:
    directory: Path
    ca_pem: bytes

    @property
    def ca_bundle_b64(self) -> str:
        return base64.b64encode(self.ca_pem).decode()

    @property
    def cert_file(self) -> Path:
        return self.directory / "tls.crt"

    @property
    def key_file(self) -> Path:
        return self.directory / "tls.key"


def service_dns_names(name: str, namespace: str) -> list[str]:
    return [name, f"{name}.{namespace}", f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local"]


def ensure_certs(
    directory: Path,
    *,
    dns_names: list[str] | tuple[str, ...] = (),
    force: bool = False,
    renew_before: int = 30 * 86400,
    now: dt.datetime | None = None,
) -> CertBundle:
    """Create what is missing; renew the serving cert when it expires within ``renew_before``
    seconds, lacks a requested name, or ``force``. Returns the CA for caBundle."""
    now = now or dt.datetime.now(dt.UTC)
    directory.mkdir(parents=True, exist_ok=True)
    ca_crt, ca_key = directory / "ca.crt", directory / "ca.key"
    names = list(dict.fromkeys([*DEFAULT_NAMES, *dns_names]))
    if ca_crt.is_file() and ca_key.is_file():
        ca_cert = x509.load_pem_x509_certificate(ca_crt.read_bytes())
        ca_private = serialization.load_pem_private_key(ca_key.read_bytes(), password=None)
        if not isinstance(ca_private, SigningKey):
            raise ValueError(f"{ca_key}: a {type(ca_private).__name__} cannot sign certificates here; "
                             "use an EC, RSA or DSA key")
    elif ca_crt.is_file() and (directory / "tls.crt").is_file() and not force:
        # Certificates provided from elsewhere (cert-manager, a Secret): use as they are.
        return CertBundle(directory, ca_crt.read_bytes())
    else:
        ca_private = ec.generate_private_key(ec.SECP256R1())
        ca_cert = _ca_certificate(ca_private, now)
        _write(ca_key, _key_pem(ca_private), mode=0o600)
        _write(ca_crt, ca_cert.public_bytes(serialization.Encoding.PEM))
        force = True
    if force or _needs_renewal(directory / "tls.crt", names, now, renew_before):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _serving_certificate(key, ca_cert, ca_private, names, now)
        # Key first: a reader that sees the new cert must find its key already there.
        _write(directory / "tls.key", _key_pem(key), mode=0o600)
        _write(directory / "tls.crt", cert.public_bytes(serialization.Encoding.PEM))
    return CertBundle(directory, ca_crt.read_bytes())


def certificate_status(cert_file: Path, now: dt.datetime | None = None) -> tuple[bool, str]:
    """(valid now, description) — readiness needs a valid serving certificate."""
    now = now or dt.datetime.now(dt.UTC)
    try:
        cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    except (OSError, ValueError) as e:
        return False, f"cannot load {cert_file}: {e}"
    if now < cert.not_valid_before_utc:
        return False, "certificate not yet valid"
    if now >= cert.not_valid_after_utc:
        return False, f"certificate expired at {cert.not_valid_after_utc.isoformat()}"
    return True, f"valid until {cert.not_valid_after_utc.isoformat()}"


def _needs_renewal(path: Path, names: list[str], now: dt.datetime, renew_before: int) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError):
        return True
    if cert.not_valid_after_utc - now < dt.timedelta(seconds=renew_before):
        return True
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return True
    have = {str(n) for n in san.get_values_for_type(x509.DNSName)} | {
        str(ip) for ip in san.get_values_for_type(x509.IPAddress)
    }
    return not set(names) <= have


def _ca_certificate(key: ec.EllipticCurvePrivateKey, now: dt.datetime) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "batchgate-ca")])
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )


def _serving_certificate(
    key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    ca_key: SigningKey,
    names: list[str],
    now: dt.datetime,
) -> x509.Certificate:
    alt: list[x509.GeneralName] = []
    for n in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            alt.append(x509.DNSName(n))
    cn = next((n for n in names if n != "localhost" and not _is_ip(n)), names[0])
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=SERVING_DAYS))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def new_seal_key_line(now: dt.datetime | None = None) -> str:
    """A fresh admission seal key as a key file line: ``<id> <base64 of 32 random bytes>``, the id
    naming when it was made (``k20261123-153000``)."""
    now = now or dt.datetime.now(dt.UTC)
    return new_key_line(now.strftime("k%Y%m%d-%H%M%S"), secrets.token_bytes(32))


def ensure_seal_keys(path: Path) -> Path:
    """The seal key file of a local server: made, with one fresh key (0600), when absent."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        _write(path, (f"{SEAL_KEYS_HEADER}{new_seal_key_line()}\n").encode(), mode=0o600)
    return path


SEAL_KEYS_HEADER = ("# batchgate admission seal keys: <id> <base64 key> per line. The first signs the\n"
                    "# templates the webhook admits, every one verifies. Rotate: add a new line at the\n"
                    "# end, let every replica load it, move it first; drop the old one later.\n")
