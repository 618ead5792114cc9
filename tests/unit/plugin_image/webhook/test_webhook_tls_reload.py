"""The serving certificate is re-read from its files when they change, without a restart."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from cryptography import x509
from hygon_dcu_plugin.serving.tls import CertificateError, CertificateReloader
from webhook_support import Authority, Running, make_authority, write_atomically

RELOADS = 'hygon_dcu_admission_tls_reloads_total{result="%s"}'


def served_certificate(running: Running, ca_pem: bytes) -> x509.Certificate:
    """Complete a new handshake (verified against ca_pem) and return the server's certificate."""
    context = running.client_context(ca_pem)
    with (
        socket.create_connection(("127.0.0.1", running.port), timeout=10) as plain,
        context.wrap_socket(plain, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def test_new_handshake_sees_replaced_certificate(
    running_webhook: Running, authority: Authority
) -> None:
    first = served_certificate(running_webhook, running_webhook.ca_pem)
    # Rotation to a certificate from a new CA: only a reload makes the new CA's check pass.
    rotated_ca = make_authority("rotated CA")
    cert_pem, key_pem, expected = rotated_ca.issue()
    write_atomically(running_webhook.key_path, key_pem)
    write_atomically(running_webhook.cert_path, cert_pem)

    second = served_certificate(running_webhook, rotated_ca.pem)
    assert second.serial_number == expected.serial_number != first.serial_number
    running_webhook.ca_pem = rotated_ca.pem  # from now on the client trusts only the new CA
    assert running_webhook.metric(RELOADS % "success") == 1
    assert running_webhook.request("GET", "/healthz")[0] == 200


def test_half_written_rotation_keeps_old_certificate_then_takes_the_pair(
    running_webhook: Running, authority: Authority
) -> None:
    first = served_certificate(running_webhook, running_webhook.ca_pem)
    cert_pem, key_pem, expected = authority.issue()
    # The new certificate lands before its key: the pair does not match.
    write_atomically(running_webhook.cert_path, cert_pem)
    still = served_certificate(running_webhook, running_webhook.ca_pem)
    assert still.serial_number == first.serial_number
    assert running_webhook.metric(RELOADS % "failure") == 1
    # The same half pair is not retried on every handshake.
    served_certificate(running_webhook, running_webhook.ca_pem)
    assert running_webhook.metric(RELOADS % "failure") == 1

    write_atomically(running_webhook.key_path, key_pem)
    assert served_certificate(running_webhook, running_webhook.ca_pem).serial_number == (
        expected.serial_number
    )
    assert running_webhook.metric(RELOADS % "success") == 1


def test_secret_volume_symlink_swap_is_seen(tmp_path: Path, authority: Authority) -> None:
    """The kubelet updates a Secret volume by pointing ..data at a new directory."""
    volume = tmp_path / "tls"
    volume.mkdir()
    old_cert, old_key, old = authority.issue()
    new_cert, new_key, new = authority.issue()
    for name, cert_pem, key_pem in (("..v1", old_cert, old_key), ("..v2", new_cert, new_key)):
        (volume / name).mkdir()
        (volume / name / "tls.crt").write_bytes(cert_pem)
        (volume / name / "tls.key").write_bytes(key_pem)
    os.symlink("..v1", volume / "..data")
    os.symlink("..data/tls.crt", volume / "tls.crt")
    os.symlink("..data/tls.key", volume / "tls.key")

    results: list[bool] = []
    reloader = CertificateReloader(
        str(volume / "tls.crt"), str(volume / "tls.key"), on_reload=results.append
    )
    before = reloader.context()
    assert reloader.context() is before
    assert results == []

    os.symlink("..v2", volume / "..data_tmp")
    os.replace(volume / "..data_tmp", volume / "..data")
    after = reloader.context()
    assert after is not before
    assert results == [True]
    assert old.serial_number != new.serial_number


def test_missing_files_at_start_are_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CertificateError, match=r"cannot read .*tls\.crt"):
        CertificateReloader(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))


def test_key_that_does_not_match_is_a_clear_error(tmp_path: Path, authority: Authority) -> None:
    cert_pem = authority.issue()[0]
    other_key = authority.issue()[1]
    (tmp_path / "tls.crt").write_bytes(cert_pem)
    (tmp_path / "tls.key").write_bytes(other_key)
    with pytest.raises(CertificateError, match="matching private key"):
        CertificateReloader(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
