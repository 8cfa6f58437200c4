"""huggingface_hub's own view of a Hugging Face cache, for tests/it/hfcache.rs
(run with the Python of a venv that has huggingface_hub; HF_ENDPOINT and
HF_HUB_OFFLINE come from the environment, as huggingface_hub reads them).

    check_cache.py scan CACHE REPO NAME...      scan_cache_dir and
        hf_hub_download(local_files_only=True) of each NAME: prints JSON
        {version, repos: [...], warnings: [...], files: {NAME: [path, sha256]}}
    check_cache.py download CACHE REPO NAME...  hf_hub_download of each NAME
        from HF_ENDPOINT into CACHE: prints JSON {NAME: path}
    check_cache.py publish CACHE REPO NAME=XETHASH...  hf_hub_download of
        each NAME, then huggingface_hub's own publish_blob_to_shared_store
        of its blob under XETHASH (what it does after a download made
        through Xet, which the test server cannot serve): prints JSON
        {NAME: [path, published]}
    check_cache.py xethash FILE...  hf_xet's Xet hash of each FILE: prints
        JSON {FILE: hash}
"""

import hashlib
import json
import os
import sys

import huggingface_hub
from huggingface_hub import hf_hub_download, scan_cache_dir


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    if sys.argv[1] == "xethash":
        import hf_xet

        files = sys.argv[2:]
        print(json.dumps({f: i.hash for f, i in zip(files, hf_xet.hash_files(files))}, sort_keys=True))
        return
    mode, cache, repo, *names = sys.argv[1:]
    if mode == "scan":
        info = scan_cache_dir(cache)
        repos = []
        for r in sorted(info.repos, key=lambda r: r.repo_id):
            repos.append(
                {
                    "repo_id": r.repo_id,
                    "repo_type": r.repo_type,
                    "size_on_disk": r.size_on_disk,
                    "nb_files": r.nb_files,
                    "refs": sorted(r.refs),
                    "revisions": [
                        {
                            "commit_hash": rev.commit_hash,
                            "refs": sorted(rev.refs),
                            "files": sorted(
                                [f.file_name, f.blob_path.name, f.size_on_disk] for f in rev.files
                            ),
                        }
                        for rev in r.revisions
                    ],
                }
            )
        files = {}
        for n in names:
            p = hf_hub_download(repo_id=repo, filename=n, cache_dir=cache, local_files_only=True)
            files[n] = [p, sha256(p)]
        out = {
            "version": huggingface_hub.__version__,
            "repos": repos,
            "size_on_disk": info.size_on_disk,
            "warnings": [str(w) for w in info.warnings],
            "files": files,
        }
    elif mode == "download":
        out = {n: hf_hub_download(repo_id=repo, filename=n, cache_dir=cache) for n in names}
    elif mode == "publish":
        from huggingface_hub.utils._shared_blobs import publish_blob_to_shared_store

        out = {}
        for arg in names:
            n, xet = arg.split("=")
            p = hf_hub_download(repo_id=repo, filename=n, cache_dir=cache)
            blob = os.path.normpath(os.path.join(os.path.dirname(p), os.readlink(p)))
            published = publish_blob_to_shared_store(
                blob_path=blob, xet_hash=xet, cache_dir=cache, expected_size=os.path.getsize(blob)
            )
            out[n] = [p, published]
    else:
        raise SystemExit(f"unknown mode {mode}")
    print(json.dumps(out, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
