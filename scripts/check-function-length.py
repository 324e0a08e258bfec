#!/usr/bin/env python3
"""Lists Swift functions, initialisers and closures-as-properties whose bodies run over a
line limit (default 60; `--limit N`) in the given directories, and with `--max-file-lines N`
the files longer than N lines. Exit 1 when any does. CI runs
`scripts/check-function-length.py --limit 80 --max-file-lines 450 Sources`.

A body is counted from the line of its `func`/`init` keyword to its closing brace, by
brace matching that skips string literals and comments."""
import re
import sys
from pathlib import Path

LIMIT = 60
DECL = re.compile(r'^\s*(?:@\w+(?:\([^)]*\))?\s+)*(?:(?:public|private|fileprivate|internal|static|final|override|mutating|nonisolated|convenience|required|class)\s+)*(func\s+[^\s(<]+|init[?!]?)\s*[(<]')


def strip(line, state):
    """Removes strings and comments; `state` carries an open block comment or multi-line string."""
    out, i = [], 0
    while i < len(line):
        if state['block']:
            end = line.find('*/', i)
            if end < 0:
                return ''.join(out)
            state['block'] = False
            i = end + 2
        elif state['multiline']:
            end = line.find('"""', i)
            if end < 0:
                return ''.join(out)
            state['multiline'] = False
            i = end + 3
        elif line.startswith('//', i):
            break
        elif line.startswith('/*', i):
            state['block'] = True
            i += 2
        elif line.startswith('"""', i):
            state['multiline'] = True
            i += 3
        elif line[i] == '"':
            j = i + 1
            while j < len(line) and line[j] != '"':
                j += 2 if line[j] == '\\' else 1
            i = j + 1
        else:
            out.append(line[i])
            i += 1
    return ''.join(out)


def long_functions(path):
    lines = path.read_text().splitlines()
    state = {'block': False, 'multiline': False}
    code = [strip(l, state) for l in lines]
    found = []
    for start, line in enumerate(code):
        m = DECL.match(line)
        if not m:
            continue
        depth, opened = 0, False
        for end in range(start, len(code)):
            for ch in code[end]:
                if ch == '{':
                    depth += 1
                    opened = True
                elif ch == '}':
                    depth -= 1
            if opened and depth <= 0:
                break
            if not opened and end > start and code[end].strip() and not code[end].rstrip().endswith((',', '(', '->')) and '{' not in code[end] and end - start > 8:
                break  # a protocol requirement: no body
        if opened and end - start + 1 > LIMIT:
            found.append((end - start + 1, f'{path}:{start + 1}: {m.group(1)} has {end - start + 1} lines'))
    return found


def main():
    global LIMIT
    args = sys.argv[1:]
    max_file_lines = None
    while args and args[0].startswith('--'):
        flag, value = args[0], args[1]
        args = args[2:]
        if flag == '--limit':
            LIMIT = int(value)
        elif flag == '--max-file-lines':
            max_file_lines = int(value)
        else:
            sys.exit(f'unknown option {flag}')
    roots = args or ['Sources/ConciergeServer']
    found = []
    for root in roots:
        for path in sorted(Path(root).rglob('*.swift')):
            found += long_functions(path)
            if max_file_lines is not None:
                lines = len(path.read_text(encoding='utf-8').splitlines())
                if lines > max_file_lines:
                    found.append((lines, f'{path}: the file has {lines} lines (at most {max_file_lines})'))
    for _, message in sorted(found, reverse=True):
        print(message)
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main())
