#!/usr/bin/env python3
"""No Swift function (or initializer, subscript, computed property) in Sources/ is longer than
60 lines, counted from its declaration to its closing brace, except the pure data tables listed
in EXCEPTIONS (file and first line of the declaration, with the reason). Part of `make test`;
exits 1 and names each one over the limit.

A long function is split where a reader would: at the steps it takes, each with a name. Not
mechanically: a helper that only the one caller could understand does not count.
"""
import re, sys, os

LIMIT = 60
# (path, declaration text prefix): reason. Pure data tables only.
EXCEPTIONS: dict[tuple[str, str], str] = {}
def strip(line):
    # drop // comments and string contents roughly
    out=[];i=0;instr=False
    while i<len(line):
        c=line[i]
        if not instr and line.startswith('//',i): break
        if c=='"':
            instr=not instr
        elif c=='\\' and instr:
            i+=2; continue
        elif not instr: out.append(c)
        i+=1
    return ''.join(out)
decl=re.compile(r'^\s*(?:@\w+(?:\([^)]*\))?\s+)*(?:(?:public|package|private|fileprivate|internal|static|class|final|override|mutating|nonisolated|convenience|required|@discardableResult|@inlinable)\s+)*(func|init|deinit|subscript|var)\b')
res=[]
for root,_,files in os.walk(sys.argv[1] if len(sys.argv) > 1 else 'Sources'):
    for f in files:
        if not f.endswith('.swift'): continue
        p=os.path.join(root,f)
        lines=open(p).read().split('\n')
        multi=False
        clean=[]
        for l in lines:
            if '"""' in l:
                n=l.count('"""')
                if n%2==1: multi=not multi
                clean.append('' ); continue
            clean.append('' if multi else strip(l))
        i=0
        while i<len(lines):
            m=decl.match(lines[i])
            if m and (m.group(1)!='var' or '{' in clean[i]):
                # find opening brace
                depth=0;start=i;opened=False;j=i
                while j<len(clean):
                    for c in clean[j]:
                        if c=='{': depth+=1;opened=True
                        elif c=='}': depth-=1
                    if opened and depth<=0: break
                    if not opened and j>i+15: break
                    j+=1
                if opened:
                    n=j-start+1
                    if n>LIMIT and not any(p.endswith(f) and lines[start].strip().startswith(d) for (f, d) in EXCEPTIONS):
                        res.append((n,p,start+1,lines[start].strip()[:90]))
                    i=i+1 if m.group(1)=='var' else j+1
                    continue
            i+=1
res.sort(reverse=True)
for n, path, line, text in res:
    print(f'function-length: {path}:{line}: {n} lines (limit {LIMIT}): {text}')
if res:
    sys.exit(1)
print(f'function-length: no function over {LIMIT} lines')
