"""``Llama.from_pretrained``: a GGUF from the Hugging Face Hub, as llama-cpp-python fetches it.

filename may be a glob (``"*Q4_K_M.gguf"``): it must match exactly one file
of the repository. The download goes through huggingface_hub (an optional
dependency, the ``hub`` extra), which caches it; the model then loads as
``Llama(path, **kwargs)``.
"""
from __future__ import annotations

import fnmatch


def hub_file(repo_id: str, filename: str, local_dir=None, cache_dir=None) -> str:
    """The local path of the one file of repo_id matching filename (downloaded)."""
    try:
        import huggingface_hub
    except ImportError as e:
        raise ImportError("Llama.from_pretrained needs huggingface-hub: "
                          "pip install 'pyllamakv[hub]'") from e
    if not isinstance(repo_id, str) or not repo_id or not isinstance(filename, str) \
            or not filename:
        raise ValueError("from_pretrained needs a repo_id and a filename (a name or a glob)")
    files = huggingface_hub.list_repo_files(repo_id)
    matches = [f for f in files if fnmatch.fnmatch(f, filename)]
    if len(matches) != 1:
        what = "no file" if not matches else f"{len(matches)} files ({', '.join(matches[:5])})"
        raise ValueError(f"{filename!r} matches {what} of {repo_id}; give one file's name")
    return huggingface_hub.hf_hub_download(repo_id, filename=matches[0], local_dir=local_dir,
                                           cache_dir=cache_dir)
