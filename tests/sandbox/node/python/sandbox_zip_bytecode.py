"""The simulated hosts' bytecode cache for the code Ansible's modules import
from their AnsiballZ payload zip.

Python compiles a module imported from a zip from its source on every import,
and 3.11-3.13's zipimporter compiles it twice (once more to name its file).
Every Ansible task on a node therefore compiled `module_utils/basic` and the
rest again: about half of a module run's CPU, and the nodes run thousands of
them in the test suite. This hook (loaded at interpreter start by
sandbox_zip_bytecode.pth) keeps each compiled module keyed by Python's magic
number, the module's name and its source, in a directory of the user's own,
so the same source is compiled once per node. What runs is unchanged: the
same source gives the same code, named after this run's zip.

Only paths holding an AnsiballZ payload (`*_payload.zip`) are served by it;
everything else imports as before. Nothing of the collection knows of it: it
lives in the node image only (tests/sandbox/node/Dockerfile).
"""

import hashlib
import marshal
import os
import sys
import zipimport
from importlib.util import MAGIC_NUMBER

CACHE_ROOT = os.environ.get("SANDBOX_ZIP_BYTECODE_CACHE", "/var/cache/sandbox-zip-bytecode")


def _renamed(code, filename):
    """The code object and every one nested in it, named after filename."""
    consts = tuple(_renamed(const, filename) if isinstance(const, type(code)) else const for const in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _own_directory():
    """This user's cache directory, made 0700 if missing; None when it is not this user's alone."""
    path = os.path.join(CACHE_ROOT, str(os.getuid()))
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError:
        return None
    if info.st_uid != os.getuid() or info.st_mode & 0o077 or not os.path.isdir(path):
        return None
    return path


class CachedZipImporter(zipimport.zipimporter):
    """zipimporter whose compiled code outlives the process."""

    def get_filename(self, fullname):
        # zipimporter's own compiles the module to learn this name.
        leaf = fullname.rpartition(".")[2]
        if self.is_package(fullname):
            return os.path.join(self.archive, self.prefix, leaf, "__init__.py")
        return os.path.join(self.archive, self.prefix, leaf + ".py")

    def get_code(self, fullname):
        source = self.get_source(fullname)
        directory = _own_directory() if source is not None else None
        if directory is None:
            return super().get_code(fullname)
        filename = self.get_filename(fullname)
        key = hashlib.sha256(MAGIC_NUMBER + fullname.encode() + b"\0" + source.encode()).hexdigest()
        path = os.path.join(directory, key)
        try:
            with open(path, "rb") as handle:
                return _renamed(marshal.load(handle), filename)
        except (OSError, ValueError, EOFError, TypeError):
            pass
        code = compile(source, filename, "exec", dont_inherit=True)
        partial = f"{path}.{os.getpid()}"
        try:
            with open(partial, "wb") as handle:
                marshal.dump(code, handle)
            os.replace(partial, path)
        except OSError:
            pass
        return code


def _payload_hook(path):
    if "_payload.zip" in path:
        return CachedZipImporter(path)
    raise ImportError("not an AnsiballZ payload")


sys.path_hooks.insert(0, _payload_hook)
