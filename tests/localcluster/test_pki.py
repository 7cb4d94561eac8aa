"""The generated PKI is what kube-apiserver and Go clients need: checked with `cryptography`."""

from __future__ import annotations

import ipaddress

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from extender.localcluster import pki


def _cert(path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_serving_cert_names_every_address_a_client_uses(tmp_path):
    files = pki.generate(tmp_path, service_ip="10.0.0.1")
    sans = _cert(files.apiserver_cert).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.DNSName)) == set(pki.APISERVER_DNS_NAMES)
    assert set(sans.get_values_for_type(x509.IPAddress)) == {
        ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("10.0.0.1")}
    usage = _cert(files.apiserver_cert).extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usage


def test_admin_cert_is_a_system_masters_client_signed_by_the_ca(tmp_path):
    files = pki.generate(tmp_path)
    ca, admin = _cert(files.ca_cert), _cert(files.admin_cert)
    admin.verify_directly_issued_by(ca)
    assert admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:masters"
    usage = admin.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in usage
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_private_keys_are_owner_only_and_sa_pair_matches(tmp_path):
    from cryptography.hazmat.primitives import serialization

    files = pki.generate(tmp_path)
    for key in (files.ca_key, files.apiserver_key, files.admin_key, files.sa_key):
        assert key.stat().st_mode & 0o077 == 0, key
    private = serialization.load_pem_private_key(files.sa_key.read_bytes(), password=None)
    public = serialization.load_pem_public_key(files.sa_pub.read_bytes())
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    assert private.public_key().public_numbers() == public.public_numbers()


def test_every_run_makes_a_new_ca(tmp_path):
    first = _cert(pki.generate(tmp_path / "a").ca_cert)
    second = _cert(pki.generate(tmp_path / "b").ca_cert)
    assert first.serial_number != second.serial_number
