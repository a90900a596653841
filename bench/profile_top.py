"""Summarise a py-spy `--format raw` (collapsed stacks) profile: the functions most often
on the stack (inclusive share of samples) and most often on top (self share).

    .venv/bin/py-spy record -p PID -d 20 -r 50 -f raw -o sink.txt --nonblocking
    .venv/bin/python bench/profile_top.py sink.txt [--top 15]
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in args.profile.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        for frame in set(frames):
            inclusive[frame] += n
        own[frames[-1]] += n
    print(f"{args.profile}: {total} samples")
    print("on the stack:")
    for frame, n in inclusive.most_common(args.top):
        print(f"  {100 * n / total:5.1f}%  {frame[:150]}")
    print("on top:")
    for frame, n in own.most_common(args.top):
        print(f"  {100 * n / total:5.1f}%  {frame[:150]}")


if __name__ == "__main__":
    main()
