#!/usr/bin/env python3
"""Lists, per crate, the files (modules) that import each other in a circle
through `crate::` or `super::` paths (comments and `mod tests` are not
imports). Exits 1 when there is one: the architecture keeps every crate's
module graph acyclic, so a reader can follow a feature top-down.

    python3 scripts/module_cycles.py
"""
import os
import re
import sys

found = 0
def modpath(root, f):
    rel=os.path.relpath(f, root)[:-3]
    parts=rel.split('/')
    if parts[-1] in ('mod','lib','main'): parts=parts[:-1]
    return tuple(parts)
os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
for crate in sorted(os.listdir('crates')):
    root=f'crates/{crate}/src'
    if not os.path.isdir(root): continue
    files=[os.path.join(d,f) for d,_,fs in os.walk(root) for f in fs if f.endswith('.rs')]
    mods={modpath(root,f):f for f in files}
    edges={m:set() for m in mods}
    for m,f in mods.items():
        src="\n".join(l for l in open(f).read().split("\n") if not l.strip().startswith("//"))
        # strip test modules roughly
        src=re.split(r'#\[cfg\(test\)\]\s*mod tests', src)[0]
        for path in re.findall(r'crate::([a-z_0-9:]+)', src):
            parts=tuple(p for p in path.split('::') if p)
            # longest prefix that is a module
            for k in range(len(parts),0,-1):
                if parts[:k] in mods:
                    t=parts[:k]
                    if t!=m and not (len(m)>len(t) and m[:len(t)]==t) and not (len(t)>len(m) and t[:len(m)]==m):
                        edges[m].add(t)
                    break
        for path in re.findall(r'super::([a-z_0-9]+)', src):
            parent=m[:-1] if not f.endswith('mod.rs') else m[:-1]
            t=parent+(path,)
            if t in mods and t!=m: edges[m].add(t)
    # find cycles via DFS
    index={}; low={}; stack=[]; on=set(); res=[]; c=[0]
    sys.setrecursionlimit(10000)
    def sc(v):
        index[v]=low[v]=c[0]; c[0]+=1; stack.append(v); on.add(v)
        for w in edges[v]:
            if w not in index: sc(w); low[v]=min(low[v],low[w])
            elif w in on: low[v]=min(low[v],index[w])
        if low[v]==index[v]:
            comp=[]
            while True:
                w=stack.pop(); on.discard(w); comp.append(w)
                if w==v: break
            if len(comp)>1: res.append(comp)
    for v in edges:
        if v not in index: sc(v)
    for comp in res:
        found += 1
        print(crate, ['::'.join(x) for x in comp])
if found:
    sys.exit(1)
print('no module import cycles')
