#!/usr/bin/env python3
"""Makes tests/fixtures/signing/: a small model directory, the unsigned
in-toto statement that the OpenSSF `model-signing` package builds for it
(manifest.json), and a signature bundle of it (model.sig) signed with a
throwaway EC key (key.pub kept; the private key is not committed).

Run by hand, in a venv with `pip install model-signing pyopenssl`
(model-signing 1.1.1 made the committed files):

    python scripts/make_signing_fixtures.py tests/fixtures/signing

`tensorfile verify DIR --manifest` must accept both files for model/, and
`tensorfile hash --write-manifest` must write manifest.json's resources and
subject digest exactly (tests/fixtures check this).
"""

import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from google.protobuf import json_format

import model_signing
from model_signing._signing import signing as ms_signing


def write_model(model: pathlib.Path, root: pathlib.Path) -> None:
    if model.exists():
        shutil.rmtree(model)
    model.mkdir(parents=True)
    valid = root / "tests/fixtures/valid/worked_example.safetensors"
    shutil.copy(valid, model / "model.safetensors")
    (model / "config.json").write_text('{"model_type": "tiny"}\n')
    # "a.txt" sorts before "a/b.bin" as strings but after it as paths
    # (component by component, as pathlib orders them): the manifest
    # follows pathlib.
    (model / "a.txt").write_text("alpha\n")
    (model / "a").mkdir()
    (model / "a" / "b.bin").write_bytes(bytes(range(256)) * 3)
    (model / "empty").write_bytes(b"")
    # git files are left out by default.
    (model / ".gitattributes").write_text("# left out of the manifest\n")


def main() -> None:
    out = pathlib.Path(sys.argv[1])
    root = pathlib.Path(__file__).resolve().parent.parent
    model = out / "model"
    write_model(model, root)

    manifest = model_signing.hashing.Config().hash(model)
    payload = ms_signing.Payload(manifest)
    statement = json.loads(json_format.MessageToJson(payload.statement.pb))
    (out / "manifest.json").write_text(json.dumps(statement, indent=2) + "\n")

    key = ec.generate_private_key(ec.SECP256R1())
    with tempfile.TemporaryDirectory() as tmp:
        pem = pathlib.Path(tmp) / "key.pem"
        pem.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        sig = out / "model.sig"
        subprocess.run(
            [
                sys.executable, "-m", "model_signing", "sign", "key",
                "--private_key", str(pem), "--signature", str(sig), str(model),
            ],
            check=True,
        )
    (out / "key.pub").write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM,
            serialization.PublicFormat.SubjectPublicKeyInfo,
        )
    )
    # The package's own verification of what it signed.
    subprocess.run(
        [
            sys.executable, "-m", "model_signing", "verify", "key",
            "--public_key", str(out / "key.pub"), "--signature", str(sig),
            str(model),
        ],
        check=True,
    )


if __name__ == "__main__":
    main()
