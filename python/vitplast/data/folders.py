"""The files of an ImageFolder (``DIR/<class>/<image>``), found without surprises.

- Only regular files are images: a FIFO, socket or device named like an image is never opened (it
  could block forever); such files are skipped with one warning that counts them and names the first.
- Each file and folder is read once: a symbolic link (or hard link) to a file or folder already found,
  a folder loop (``a/up -> ..``) among them, is not followed; one warning counts such links and names
  the first. The real tree is walked before any link, so a link never takes a file from its own folder.
- A class folder that is a link to the data folder itself or to another class folder is not a class.

`ImageFolder` is torchvision's with these rules; the order of the samples is torchvision's
(by class, then folders and files sorted by path).
"""

from __future__ import annotations

import os
import stat
import warnings
from dataclasses import dataclass, field

from torchvision import datasets
from torchvision.datasets.folder import IMG_EXTENSIONS

from .images import file_kind


def _key(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


@dataclass
class _Scan:
    """What a walk found: each image once, the links not followed, the special files skipped."""

    folders: set = field(default_factory=set)
    files: set = field(default_factory=set)
    images: list = field(default_factory=list)  # (path, class index)
    repeated: list = field(default_factory=list)  # links (or hard links) to what was already found
    special: list = field(default_factory=list)  # (path, kind): FIFOs, sockets, devices
    broken: list = field(default_factory=list)  # links to nothing

    def add_file(self, path: str, st: os.stat_result, target: int) -> None:
        if not path.lower().endswith(IMG_EXTENSIONS):
            return
        if not stat.S_ISREG(st.st_mode):
            self.special.append((path, file_kind(st.st_mode)))
        elif _key(st) in self.files:
            self.repeated.append(path)
        else:
            self.files.add(_key(st))
            self.images.append((path, target))

    def walk(self, top: str, target: int) -> list[str]:
        """Adds the real tree under ``top`` (a folder already counted); returns the links met, unfollowed."""
        links, stack = [], [top]
        while stack:
            folder = stack.pop()
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError:
                continue
            subfolders = []
            for entry in entries:
                try:
                    if entry.is_symlink():
                        links.append(entry.path)
                        continue
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    if _key(st) in self.folders:
                        self.repeated.append(entry.path)
                    else:
                        self.folders.add(_key(st))
                        subfolders.append(entry.path)
                else:
                    self.add_file(entry.path, st, target)
            stack.extend(reversed(subfolders))
        return links

    def follow(self, links: list[str], target: int) -> None:
        """Follows ``links`` (and the links under them) to what was not found yet."""
        queue = sorted(links)
        while queue:
            link = queue.pop(0)
            try:
                st = os.stat(link)
            except OSError:
                self.broken.append(link)
                continue
            if not stat.S_ISDIR(st.st_mode):
                self.add_file(link, st, target)
            elif _key(st) in self.folders:
                self.repeated.append(link)
            else:
                self.folders.add(_key(st))
                queue.extend(sorted(self.walk(link, target)))

    def warn(self, root: str) -> None:
        if self.special:
            path, kind = self.special[0]
            warnings.warn(f"{root}: skipped {len(self.special)} file(s) named like images that are not "
                          f"regular files (first: {path}, {kind}); they are never opened", stacklevel=4)
        if self.repeated:
            first = self.repeated[0]
            warnings.warn(f"{root}: did not follow {len(self.repeated)} link(s) to files or folders already "
                          f"read (first: {first} -> {os.path.realpath(first)}); each image is read once and "
                          "a folder loop is not entered", stacklevel=4)
        if self.broken:
            warnings.warn(f"{root}: skipped {len(self.broken)} broken link(s) (first: {self.broken[0]})",
                          stacklevel=4)


class EmptyClassFolder(ValueError):
    """A class folder of an ImageFolder that holds no image (``path``), while others do: a class the
    model could never see (torchvision's ImageFolder refuses it too, naming the class)."""

    def __init__(self, path: str, empty: int, classes: int) -> None:
        self.path = path
        others = f" ({empty} of the {classes} class folders are empty)" if empty > 1 else ""
        super().__init__(f"class folder {path!r} holds no image{others}; supported extensions: "
                         f"{', '.join(IMG_EXTENSIONS)}. Put images in it, or remove it")


class ImageFolder(datasets.ImageFolder):
    """torchvision's ImageFolder, with the rules of this module."""

    def find_classes(self, directory):
        root = os.stat(directory)
        seen, classes, skipped = {_key(root)}, [], []
        entries = sorted(os.scandir(directory), key=lambda e: (e.is_symlink(), e.name))  # real folders first
        for entry in entries:
            try:
                st = entry.stat()  # the folder a link points to
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode) and _key(st) in seen:
                skipped.append(entry.path)
            elif stat.S_ISDIR(st.st_mode):
                seen.add(_key(st))
                classes.append(entry.name)
        if skipped:
            warnings.warn(f"{directory}: {len(skipped)} link(s) to the data folder or to another class "
                          f"folder are not classes (first: {skipped[0]} -> {os.path.realpath(skipped[0])})",
                          stacklevel=3)
        if not classes:
            raise FileNotFoundError(f"Couldn't find any class folder in {directory}.")
        classes.sort()
        return classes, {name: i for i, name in enumerate(classes)}

    @staticmethod
    def make_dataset(directory, class_to_idx, extensions=None, is_valid_file=None, allow_empty=False):
        directory = os.fspath(directory)
        scan = _Scan(folders={_key(os.stat(directory))})
        class_dirs = {name: os.path.join(directory, name) for name in class_to_idx}
        links = {}
        for name in sorted(class_dirs, key=lambda n: os.path.islink(class_dirs[n])):  # real folders first
            scan.folders.add(_key(os.stat(class_dirs[name])))
            links[name] = scan.walk(class_dirs[name], class_to_idx[name])
        for name, found in links.items():  # every real tree first: a link never takes a file from its own
            scan.follow(found, class_to_idx[name])
        scan.warn(directory)
        found = {target for _, target in scan.images}
        empty = sorted(name for name, i in class_to_idx.items() if i not in found)
        if empty and not allow_empty and len(empty) < len(class_to_idx):
            # some classes without images: named, as a bad folder (ValueError), not as no data at all
            raise EmptyClassFolder(class_dirs[empty[0]], len(empty), len(class_to_idx))
        if empty and not allow_empty:
            raise FileNotFoundError(f"Found no valid file for the classes {', '.join(empty)}. Supported "
                                    f"extensions are: {', '.join(IMG_EXTENSIONS)}")
        return sorted(scan.images, key=lambda s: (s[1], os.path.dirname(s[0]), os.path.basename(s[0])))
