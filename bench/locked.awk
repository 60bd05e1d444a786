# locked.awk - how many locked instructions a program's own code ran, and
# how many mutexes it took, from a callgrind profile (issue 10's hot-path
# budget: "one lock or none per task, no shared-cache-line atomics").
#   awk -f bench/locked.awk <(objdump -d --no-show-raw-insn PROG) PROFILE
# PROFILE: valgrind --tool=callgrind --dump-instr=yes --dump-line=no PROG.
# Locked: a lock prefix, or xchg with memory (locked implicitly). Not
# counted: the bench harness's own functions (ab_*, bu_*: its completion
# latch), and libc's code, whose mutexes are counted as the calls to
# pthread_mutex_lock / pthread_mutex_trylock instead. Prints
# "<locked instructions> <mutex calls>". POSIX awk: no strtonum.
function hex(s,    i, v) {
    v = 0
    for (i = 1; i <= length(s); i++)
        v = v * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1
    return v
}
FNR == NR {
    if ($0 ~ /^[0-9a-f]+ <.*>:$/) {
        fn = $2
        harness = fn ~ /^<(ab|bu)_/
    } else if (!harness && $0 ~ /^ +[0-9a-f]+:\t/) {
        split($0, f, "\t")
        ins = f[3] != "" ? f[3] : f[2]
        if (ins ~ /^lock / || (ins ~ /^xchg/ && ins ~ /\(/)) {
            a = f[1]
            gsub(/[ :]/, "", a)
            locked[hex(a)] = 1
        }
    }
    next
}
/^c?fn=/ {
    # fn=(id) name / cfn=(id) name: the name only the first time an id is used
    id = $1
    sub(/^c?fn=/, "", id)
    if (NF > 1)
        name[id] = $2
    if ($1 ~ /^cfn=/)
        callee = name[id]
    next
}
/^calls=/ {
    skip = 1
    if (callee ~ /^pthread_mutex_(try)?lock(@|$)/) {
        c = $1
        sub(/^calls=/, "", c)
        mutexes += c
    }
    next
}
/^(0x[0-9a-f]+|[+-][0-9]+|\*)( |$)/ {
    p = $1
    if (p ~ /^0x/)
        pos = hex(substr(p, 3))
    else if (p ~ /^\+/)
        pos += substr(p, 2) + 0
    else if (p ~ /^-/)
        pos -= substr(p, 2) + 0
    if (skip) { # the inclusive cost of the call just named
        skip = 0
        next
    }
    if (pos in locked)
        n += $2
}
END { print n + 0, mutexes + 0 }
