"""An ordinary script that needs a GitHub token: it reads GITHUB_TOKEN and lists
a repository's open issues. Nothing in it knows about Tessera."""

import os
import sys

import requests

repo = sys.argv[1] if len(sys.argv) > 1 else "rust-lang/rust"
token = os.environ["GITHUB_TOKEN"]  # under `tessera exec`: a placeholder, worthless elsewhere
r = requests.get(
    f"https://api.github.com/repos/{repo}/issues",
    params={"state": "open", "per_page": 5},
    headers={"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json"},
    timeout=20,
)
print(r.status_code)
for issue in r.json() if r.ok else [r.json()]:
    print(issue.get("number"), issue.get("title") or issue.get("error"))
