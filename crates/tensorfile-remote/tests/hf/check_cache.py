"""huggingface_hub's own view of a Hugging Face cache, for tests/hfcache.rs
(run with the Python of a venv that has huggingface_hub; HF_ENDPOINT and
HF_HUB_OFFLINE come from the environment, as huggingface_hub reads them).

    check_cache.py scan CACHE REPO NAME...      scan_cache_dir and
        hf_hub_download(local_files_only=True) of each NAME: prints JSON
        {version, repos: [...], warnings: [...], files: {NAME: [path, sha256]}}
    check_cache.py download CACHE REPO NAME...  hf_hub_download of each NAME
        from HF_ENDPOINT into CACHE: prints JSON {NAME: path}
"""

import hashlib
import json
import sys

import huggingface_hub
from huggingface_hub import hf_hub_download, scan_cache_dir


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
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
            "warnings": [str(w) for w in info.warnings],
            "files": files,
        }
    elif mode == "download":
        out = {n: hf_hub_download(repo_id=repo, filename=n, cache_dir=cache) for n in names}
    else:
        raise SystemExit(f"unknown mode {mode}")
    print(json.dumps(out, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
