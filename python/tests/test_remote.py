"""Remote inputs from Python: ``safe_open``, ``load_file``, ``validate`` and
``inspect`` take ``http(s)://``, ``hf://`` and ``s3://`` URLs, read through
tensorfile-remote (the sources the CLI reads), and give exactly what the
local reader gives: verdicts, headers, tensors, bytes.

The HTTP server (remote_server.py) runs in a thread of this interpreter, so
these tests also show that the GIL is released while requests are in
flight: were it held, the server could not answer. ``s3://`` runs against
moto's server when ``TENSORFILE_TEST_S3`` names one (scripts/test-all.sh
starts it), else it is skipped, except in CI, where it must run."""

from __future__ import annotations

import hashlib
import os
import re
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest

import tensorfile
from tensorfile import SafetensorError, safe_open
from tensorfile.numpy import load_file

from conftest import FIXTURES
from remote_server import Server

SAFETENSORS = sorted(p for p in FIXTURES.rglob("*.safetensors") if p.is_file())
# Sets of safetensors shards (an index beside its shards).
SETS = sorted(
    p.parent
    for p in FIXTURES.rglob("*.safetensors.index.json")
    if any(p.parent.glob("*.safetensors"))
)


def rel(path) -> str:
    return path.relative_to(FIXTURES).as_posix()


@pytest.fixture(scope="module")
def server():
    s = Server()
    for path in FIXTURES.rglob("*"):
        if path.is_file():
            s.put(f"/fx/{rel(path)}", path.read_bytes())
    yield s
    s.stop()


@pytest.fixture
def hub(server, monkeypatch, tmp_path):
    """The server as the Hub: HF_ENDPOINT at it, and no token of the
    machine's read (HF_HOME points at an empty directory)."""
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_TOKEN_PATH", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    return server


def same_tensors(local, remote, where):
    assert remote.keys() == local.keys(), where
    assert remote.offset_keys() == local.offset_keys(), where
    assert remote.metadata() == local.metadata(), where
    for name in local.keys():
        try:
            a = local.get_tensor(name)
        except SafetensorError:
            # A dtype no array holds (F6): refused remotely too, and read cast.
            with pytest.raises(SafetensorError):
                remote.get_tensor(name)
            a = local.get_tensor(name, dtype="F32")
            b = remote.get_tensor(name, dtype="F32")
            assert b.tobytes() == a.tobytes(), (where, name)
            continue
        b = remote.get_tensor(name)
        assert b.dtype == a.dtype and b.shape == a.shape, (where, name)
        assert b.tobytes() == a.tobytes(), (where, name)


def without_file(described):
    """A description without the keys that name where the input is."""
    described = dict(described)
    for key in ("file", "path", "index"):
        described.pop(key, None)
    return described


@pytest.mark.parametrize("path", SAFETENSORS, ids=rel)
def test_every_fixture_over_http_reads_as_locally(server, path):
    url = f"{server.url}/fx/{rel(path)}"
    local_verdict = tensorfile.validate(path)
    remote_verdict = tensorfile.validate(url)
    assert remote_verdict["file"] == url
    for key in ("valid", "rule", "warnings"):
        assert remote_verdict[key] == local_verdict[key], (url, key, local_verdict, remote_verdict)
    if not local_verdict["valid"]:
        # The same error, naming the URL where the local one names the path.
        local_error = local_verdict["error"].replace(str(path), "<file>")
        remote_error = remote_verdict["error"].replace(url, "<file>")
        assert remote_error == local_error
        with pytest.raises(SafetensorError):
            safe_open(url, "np")
        return
    try:
        local = safe_open(path, "np")
    except SafetensorError:
        # Valid by the rules, refused by the reader (a duplicate key): so
        # remotely too.
        with pytest.raises(SafetensorError):
            safe_open(url, "np")
        return
    with local, safe_open(url, "np") as remote:
        same_tensors(local, remote, url)
    assert without_file(tensorfile.inspect(url)) == without_file(tensorfile.inspect(path))
    try:
        local_arrays = load_file(path)
    except SafetensorError as e:
        with pytest.raises(SafetensorError, match=re.escape(str(e))):
            load_file(url)
        return
    remote_arrays = load_file(url)
    assert remote_arrays.keys() == local_arrays.keys()
    for name, a in local_arrays.items():
        assert remote_arrays[name].tobytes() == a.tobytes(), (url, name)


def test_a_slice_reads_only_its_bytes(server):
    path = FIXTURES / "valid" / "llama_two_layers_bf16.safetensors"
    url = f"{server.url}/fx/{rel(path)}"
    with safe_open(path, "np") as local, safe_open(url, "np") as remote:
        # The last row of the last matrix: past the first 64 KiB, which the
        # header's read brought.
        name = [n for n in local.offset_keys() if len(local.get_slice(n).get_shape()) == 2][-1]
        rows = local.get_slice(name).get_shape()[0]
        server.reset_counts()
        got = remote.get_slice(name)[rows - 1 : rows]
        requests, sent = server.counts()
        assert got.tobytes() == local.get_slice(name)[rows - 1 : rows].tobytes()
        assert (requests, sent) == (1, got.nbytes)


def test_hashes_of_remote_tensors(server):
    path = FIXTURES / "valid" / "llama_two_layers_bf16.safetensors"
    url = f"{server.url}/fx/{rel(path)}"
    assert without_file(tensorfile.inspect(url, hash=True)) == without_file(
        tensorfile.inspect(path, hash=True)
    )


@pytest.mark.parametrize("directory", SETS, ids=rel)
def test_sets_over_http_read_as_locally(server, directory):
    index = next(directory.glob("*.safetensors.index.json"))
    # The index, and the directory (not listable over plain HTTP: its index
    # is asked for by the usual names); each described as its local twin.
    for path, url in (
        (index, f"{server.url}/fx/{rel(index)}"),
        (directory, f"{server.url}/fx/{rel(directory)}/"),
    ):
        assert tensorfile.validate(url)["valid"], url
        with safe_open(path, "np") as local, safe_open(url, "np") as remote:
            same_tensors(local, remote, url)
        assert without_file(tensorfile.inspect(url)) == without_file(tensorfile.inspect(path))


def test_hub_files_and_repositories(hub):
    directory = FIXTURES / "real" / "mlx_lm" / "llama_q4"
    files = {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}
    hub.hub_repo("org/llama", files)
    with safe_open(directory, "np") as local:
        # The repository: listed through the tree API, the index found.
        for url in ("hf://org/llama", "hf://org/llama@main", "hf://org/llama/model.safetensors.index.json"):
            with safe_open(url, "np") as remote:
                same_tensors(local, remote, url)
            assert tensorfile.validate(url)["valid"], url
    shard = sorted(n for n in files if n.endswith(".safetensors"))[0]
    with safe_open(directory / shard, "np") as local, safe_open(f"hf://org/llama/{shard}", "np") as remote:
        same_tensors(local, remote, shard)
    missing = tensorfile.validate("hf://org/llama/none.safetensors")
    assert not missing["valid"] and "not found" in missing["error"], missing


def test_a_missing_remote_file_is_file_not_found(server):
    # As a missing local file is (the reference's exception), naming the URL.
    url = f"{server.url}/fx/nothing-here.safetensors"
    for read in (lambda u: safe_open(u, "np"), load_file, tensorfile.inspect):
        with pytest.raises(FileNotFoundError, match="nothing-here.safetensors"):
            read(url)
    verdict = tensorfile.validate(url)
    # The verdict names the URL once, as its "file".
    assert not verdict["valid"] and verdict["error"] == "not found (HTTP 404)", verdict


def test_one_remote_handle_from_many_threads(server):
    path = FIXTURES / "valid" / "llama_two_layers_bf16.safetensors"
    url = f"{server.url}/fx/{rel(path)}"
    with safe_open(path, "np") as local:
        want = {n: local.get_tensor(n).tobytes() for n in local.keys()}
    errors = []
    with safe_open(url, "np", backend="pread") as remote:

        def work(names):
            try:
                for n in names:
                    assert remote.get_tensor(n).tobytes() == want[n], n
            except Exception as e:  # reported below
                errors.append(e)

        names = sorted(want)
        threads = [threading.Thread(target=work, args=(names[i::4],)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors


def test_remote_tensors_are_owned_and_writeable(server):
    path = FIXTURES / "valid" / "llama_two_layers_bf16.safetensors"
    url = f"{server.url}/fx/{rel(path)}"
    with safe_open(url, "np") as remote:
        name = remote.offset_keys()[-1]
        t = remote.get_tensor(name)
    # The handle is closed; the array lives on, in memory of its own.
    assert t.flags.writeable and t.nbytes > 0
    t.view(np.uint8)[...] = 0
    with safe_open(path, "np") as local, safe_open(url, "np") as remote:
        assert remote.get_tensor(name).tobytes() == local.get_tensor(name).tobytes()


def s3_endpoint():
    url = os.environ.get("TENSORFILE_TEST_S3")
    if url:
        return url
    if os.environ.get("CI"):
        pytest.fail("CI must run the S3 tests: scripts/test-all.sh starts moto and sets TENSORFILE_TEST_S3")
    pytest.skip("no S3 server (set TENSORFILE_TEST_S3 to a moto_server URL, as scripts/test-all.sh does)")


def s3_put(endpoint: str, path: str, data: bytes = b"", acl: str = "public-read") -> None:
    """A bucket or an object made with a plain unsigned request (moto takes
    them; its ACLs then decide who may read)."""
    # Not urllib's default form type, which moto tries to parse.
    headers = {"x-amz-acl": acl, "Content-Type": "application/octet-stream"}
    request = urllib.request.Request(f"{endpoint}/{path}", data=data, method="PUT", headers=headers)
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 200, answer.status


def test_s3_objects_and_sets(monkeypatch):
    endpoint = s3_endpoint()
    bucket = "tf-python-" + hashlib.sha256(os.urandom(8)).hexdigest()[:12]
    s3_put(endpoint, bucket)
    single = FIXTURES / "valid" / "llama_two_layers_bf16.safetensors"
    s3_put(endpoint, f"{bucket}/one.safetensors", single.read_bytes())
    directory = FIXTURES / "real" / "sharded" / "unet_sharded_safetensors"
    for p in directory.iterdir():
        s3_put(endpoint, f"{bucket}/unet/{p.name}", p.read_bytes())
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    # Signed (moto does not check signatures), then anonymous: the objects
    # are public.
    for signed in (True, False):
        if signed:
            monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
            monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing-secret-key")
            monkeypatch.delenv("AWS_NO_SIGN_REQUEST", raising=False)
        else:
            monkeypatch.setenv("AWS_NO_SIGN_REQUEST", "true")
        url = f"s3://{bucket}/one.safetensors"
        with safe_open(single, "np") as local, safe_open(url, "np") as remote:
            same_tensors(local, remote, url)
        assert tensorfile.validate(url)["valid"]
        assert without_file(tensorfile.inspect(url)) == without_file(tensorfile.inspect(single))
        assert load_file(url).keys() == load_file(single).keys()
        with safe_open(directory, "np") as local:
            for url in (f"s3://{bucket}/unet/", f"s3://{bucket}/unet"):
                with safe_open(url, "np") as remote:
                    same_tensors(local, remote, url)
        missing = tensorfile.validate(f"s3://{bucket}/none.safetensors")
        assert not missing["valid"] and "not found" in missing["error"], missing


# Azurite's well-known account and key (public: its documentation's).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def azure_endpoint():
    url = os.environ.get("TENSORFILE_TEST_AZURE")
    if url:
        return url.rstrip("/")
    if os.environ.get("CI"):
        pytest.fail("CI must run the Azure tests: scripts/test-all.sh starts Azurite and sets TENSORFILE_TEST_AZURE")
    pytest.skip("no Azurite (set TENSORFILE_TEST_AZURE to its blob endpoint, as scripts/test-all.sh does)")


def azure_put(endpoint: str, path: str, data: bytes | None = None) -> None:
    """A container (``data`` None) or a block blob, made with a request
    signed with the account key (SharedKey: Azurite checks it)."""
    import base64
    import email.utils
    import hmac

    version = "2021-08-06"
    date = email.utils.formatdate(usegmt=True)
    # A Content-Type of our own (signed): urllib would add its form type.
    headers = {"x-ms-date": date, "x-ms-version": version, "Content-Type": "application/octet-stream"}
    query, resource_query = "", ""
    if data is None:
        query, resource_query = "?restype=container", "\nrestype:container"
        data = b""
    else:
        headers["x-ms-blob-type"] = "BlockBlob"
    length = str(len(data)) if data else ""
    content_type = headers["Content-Type"]
    canonical_headers = "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()) if k.startswith("x-ms-"))
    to_sign = (
        f"PUT\n\n\n{length}\n\n{content_type}\n\n\n\n\n\n\n{canonical_headers}"
        f"/{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{path}{resource_query}"
    )
    sig = base64.b64encode(
        hmac.new(base64.b64decode(AZURITE_KEY), to_sign.encode(), hashlib.sha256).digest()
    ).decode()
    headers["Authorization"] = f"SharedKey {AZURITE_ACCOUNT}:{sig}"
    request = urllib.request.Request(
        f"{endpoint}/{AZURITE_ACCOUNT}/{path}{query}", data=data, method="PUT", headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert answer.status == 201, answer.status
    except urllib.error.HTTPError as e:
        # The container is there already (another run against this Azurite).
        assert e.code == 409 and query, (e.code, e.read())


def test_azure_blobs_and_sets(monkeypatch):
    endpoint = azure_endpoint()
    container = "tf-python-" + hashlib.sha256(os.urandom(8)).hexdigest()[:12]
    azure_put(endpoint, container)
    single = FIXTURES / "valid" / "llama_two_layers_bf16.safetensors"
    azure_put(endpoint, f"{container}/one.safetensors", single.read_bytes())
    directory = FIXTURES / "real" / "sharded" / "unet_sharded_safetensors"
    for p in directory.iterdir():
        azure_put(endpoint, f"{container}/unet/{p.name}", p.read_bytes())
    # The emulator's settings: its account and key, signed by object_store.
    monkeypatch.setenv("AZURE_STORAGE_USE_EMULATOR", "true")
    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", endpoint)
    url = f"az://{container}/one.safetensors"
    with safe_open(single, "np") as local, safe_open(url, "np") as remote:
        same_tensors(local, remote, url)
    loaded, expected = load_file(url), load_file(single)
    assert loaded.keys() == expected.keys()
    for name in expected:
        assert loaded[name].tobytes() == expected[name].tobytes(), name
    assert tensorfile.validate(url)["valid"]
    with safe_open(directory, "np") as local:
        for url in (f"az://{container}/unet/", f"az://{container}/unet"):
            with safe_open(url, "np") as remote:
                same_tensors(local, remote, url)
    missing = f"az://{container}/none.safetensors"
    with pytest.raises(FileNotFoundError, match=re.escape(missing)):
        safe_open(missing, "np")


def test_s3_outputs_and_replace(monkeypatch, tmp_path):
    endpoint = s3_endpoint()
    bucket = "tf-python-out-" + hashlib.sha256(os.urandom(8)).hexdigest()[:12]
    s3_put(endpoint, bucket, acl="private")
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing-secret-key")
    monkeypatch.delenv("AWS_NO_SIGN_REQUEST", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    single = FIXTURES / "valid" / "llama_two_layers_bf16.safetensors"

    # A file: the same tensors as the local output.
    url = f"s3://{bucket}/m/model.safetensors"
    report = tensorfile.convert(single, url, "F32")
    assert report["files"] == [url], report
    local = tmp_path / "local.safetensors"
    tensorfile.convert(single, local, "F32")
    with safe_open(local, "np") as a, safe_open(url, "np") as b:
        same_tensors(a, b, url)
    # Refused unless replace=True, naming the object and the keyword.
    with pytest.raises(SafetensorError) as refused:
        tensorfile.convert(single, url, "bf16")
    assert str(refused.value) == f"{url}: already exists: give replace=True to replace it"
    assert refused.value.path == url
    tensorfile.convert(single, url, "bf16", replace=True)
    with safe_open(single, "np") as a, safe_open(url, "np") as b:
        same_tensors(a, b, url)

    # A set, shards first and the index last; quantize and dequantize
    # take replace= too.
    report = tensorfile.convert(single, f"s3://{bucket}/set/", max_shard_size=50_000)
    assert report["index"].startswith(f"s3://{bucket}/set/"), report
    with safe_open(single, "np") as a, safe_open(report["index"], "np") as b:
        same_tensors(a, b, report["index"])
    q = f"s3://{bucket}/q.safetensors"
    tensorfile.quantize(single, q, "int4-g32-sym")
    with pytest.raises(SafetensorError, match="replace=True"):
        tensorfile.quantize(single, q, "int4-g32-sym")
    tensorfile.quantize(single, q, "int4-g32-sym", replace=True)
    d = f"s3://{bucket}/d.safetensors"
    tensorfile.dequantize(q, d, "F32")
    with pytest.raises(SafetensorError, match="replace=True"):
        tensorfile.dequantize(q, d, "F32")
    tensorfile.dequantize(q, d, "F32", replace=True)

    # edit_metadata of an object: rewritten whole, in its place.
    report = tensorfile.edit_metadata(url, set={"owner": "tensorfile"})
    assert report["file"] == url and not report["in_place"], report
    with safe_open(url, "np") as b:
        assert b.metadata()["owner"] == "tensorfile"


def gcs_endpoint():
    """The GCS stand-in scripts/test-all.sh starts (tensorfile-testkit's
    ``gcs-stand-in``, with buckets ``tf-python`` (private) and
    ``tf-python-public``) and its service account's key file."""
    url, key = os.environ.get("TENSORFILE_TEST_GCS"), os.environ.get("TENSORFILE_TEST_GCS_KEY")
    if url and key:
        return url.rstrip("/"), key
    if os.environ.get("CI"):
        pytest.fail("CI must run the GCS tests: scripts/test-all.sh starts the stand-in and sets TENSORFILE_TEST_GCS")
    pytest.skip("no GCS stand-in (scripts/test-all.sh starts one and sets TENSORFILE_TEST_GCS and TENSORFILE_TEST_GCS_KEY)")


def gcs_put(endpoint: str, path: str, data: bytes) -> None:
    """An object put anonymously (the public bucket takes it)."""
    request = urllib.request.Request(f"{endpoint}/{path}", data=data, method="PUT")
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 200, answer.status


def test_gcs_objects_sets_and_outputs(monkeypatch, tmp_path):
    endpoint, key = gcs_endpoint()
    prefix = "t-" + hashlib.sha256(os.urandom(8)).hexdigest()[:12]
    single = FIXTURES / "valid" / "llama_two_layers_bf16.safetensors"
    directory = FIXTURES / "real" / "sharded" / "unet_sharded_safetensors"
    gcs_put(endpoint, f"tf-python-public/{prefix}/one.safetensors", single.read_bytes())
    for p in directory.iterdir():
        gcs_put(endpoint, f"tf-python-public/{prefix}/unet/{p.name}", p.read_bytes())
    monkeypatch.setenv("GOOGLE_BASE_URL", endpoint)
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")
    monkeypatch.setenv("TMPDIR", str(tmp_path))

    # Reads: anonymously from the public bucket, then with the service
    # account's key file as application default credentials.
    for credentials in (None, key):
        if credentials:
            monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", credentials)
        url = f"gs://tf-python-public/{prefix}/one.safetensors"
        with safe_open(single, "np") as local, safe_open(url, "np") as remote:
            same_tensors(local, remote, url)
        loaded, expected = load_file(url), load_file(single)
        assert loaded.keys() == expected.keys()
        for name in expected:
            assert loaded[name].tobytes() == expected[name].tobytes(), name
        assert tensorfile.validate(url)["valid"]
        with safe_open(directory, "np") as local, safe_open(f"gs://tf-python-public/{prefix}/unet/", "np") as remote:
            same_tensors(local, remote, "unet")
    missing = f"gs://tf-python-public/{prefix}/none.safetensors"
    with pytest.raises(FileNotFoundError, match=re.escape(missing)):
        safe_open(missing, "np")

    # Outputs into the private bucket: a file, refused unless replace=True,
    # and a set, each read back as the local output.
    url = f"gs://tf-python/{prefix}/m.safetensors"
    assert tensorfile.convert(single, url, "F32")["files"] == [url]
    tensorfile.convert(single, tmp_path / "local.safetensors", "F32")
    with safe_open(tmp_path / "local.safetensors", "np") as a, safe_open(url, "np") as b:
        same_tensors(a, b, url)
    with pytest.raises(SafetensorError) as refused:
        tensorfile.convert(single, url, "bf16")
    assert str(refused.value) == f"{url}: already exists: give replace=True to replace it"
    tensorfile.convert(single, url, "bf16", replace=True)
    report = tensorfile.convert(single, f"gs://tf-python/{prefix}/set/", max_shard_size=50_000)
    assert report["index"] == f"gs://tf-python/{prefix}/set/llama_two_layers_bf16.safetensors.index.json", report
    with safe_open(single, "np") as a, safe_open(report["index"], "np") as b:
        same_tensors(a, b, report["index"])
    # Without credentials the private bucket refuses, naming the object.
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS")
    with pytest.raises(SafetensorError, match=re.escape(url)):
        safe_open(url, "np")


# The test certificate authority and the 127.0.0.1 certificate it signed
# (scripts/make-test-tls.sh), which the Rust tests' TLS stand-in serves.
TEST_TLS = FIXTURES.parents[1] / "crates" / "tensorfile-testkit" / "src" / "tls"


def test_https_with_a_private_certificate_authority(monkeypatch):
    server = Server(tls=(str(TEST_TLS / "server.pem"), str(TEST_TLS / "server.key.pem")))
    try:
        single = FIXTURES / "valid" / "llama_two_layers_bf16.safetensors"
        server.put("/one.safetensors", single.read_bytes())
        url = f"{server.url}/one.safetensors"
        assert url.startswith("https://127.0.0.1:")
        # (A time budget gives each open a client of its own, which reads
        # SSL_CERT_FILE when made: the process's shared one is made once.)
        # Not trusted by default: one line that names the variable to set.
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
        with pytest.raises(SafetensorError, match="certificate.*SSL_CERT_FILE") as refused:
            safe_open(url, "np", timeout=60)
        assert "\n" not in str(refused.value)
        # With the authority in SSL_CERT_FILE: read as the local file.
        monkeypatch.setenv("SSL_CERT_FILE", str(TEST_TLS / "ca.pem"))
        with safe_open(single, "np") as local, safe_open(url, "np", timeout=60) as remote:
            same_tensors(local, remote, url)
    finally:
        server.stop()
