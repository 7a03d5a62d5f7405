/* Native slot allocators of the elastic world (envs.sim.elastic._alloc_native).
 *
 * A port of the Python allocators DRF, FixedDemand (and its uniform-demand stacks: bundle,
 * adasrsf, tiresias), Optimus (allocate and fill) and EfficientSRTF (every option: efficiency,
 * head, head_efficiency, backfill, oracle_speed_factor, stop_at_first_failure) together with
 * SlotCluster's four placement rules.  The Python classes (envs/sim/elastic/allocators.py,
 * fixed_demand.py, speed_aware.py, cluster.py) are the specification: this file computes the
 * same floating-point operations in the same order, so the counts, the decision log and the
 * cluster's free slots are bit-identical (tests/sim/elastic/test_native_alloc.py cross-checks
 * both on every allocator, option and placement rule).  The Python wrapper that chooses this
 * path, caches the per-job rows and writes the results back is envs/sim/elastic/native_alloc.py.
 *
 * Also the slot transition of SlotSimulator (end_slot: the checks, the training loop, the
 * utilisation, reward and record; the active jobs' views) and the env's observation rows of
 * a new slot (slot_obs), with simulator.py and envs/gym/cluster/observation.py the
 * specification (tests/sim/elastic/test_native_slot.py): see "the slot transition" below;
 * and the env's per-slot bookkeeping of its window (open_rows, set_counts, decided,
 * any_valid; envs/gym/cluster/env.py the specification): "the env's slot glue".
 *
 * The cluster is two arrays of free CPU / GPU slots per node; a search scans the nodes (the
 * Python class keeps an index so that its search does not grow with the nodes; in C a scan
 * of a few hundred nodes is cheaper than maintaining one).  The rules, as in
 * SlotCluster._search: least_loaded = the least (used CPU + used GPU) among the nodes the task
 * fits on, ties by index; reference = the least-loaded node overall, if the task fits there;
 * first_fit = the lowest index it fits on; packing = the most loaded node it fits on, ties by
 * index.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h> /* T_OBJECT_EX, READONLY: the fields of _Run (a slots dataclass) */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef DLSCHED_SOURCE_SHA256
#define DLSCHED_SOURCE_SHA256 "unknown"
#endif

enum { RULE_LEAST = 0, RULE_REFERENCE = 1, RULE_FIRST_FIT = 2, RULE_PACKING = 3 };
enum { KIND_DRF = 0, KIND_FIXED = 1, KIND_OPTIMUS = 2, KIND_ESRTF = 3 };
enum { ROLE_WORKER = 0, ROLE_PS = 1, ROLE_BUNDLE = 2 };
enum { ORDER_FIFO = 0, ORDER_SRSF = 1, ORDER_LAS = 2 };

/* The packed static row of a job (native_alloc.py's ROW_FORMAT "<8q3d"). */
typedef struct {
    long long jid, arrival, wc, wg, pc, pg, maxw, maxp;
    double num_epochs, speed_factor, ipe;
} Row;

typedef struct {
    Row r;
    const double *grid; /* speed[p * (maxw + 1) + w], or NULL */
    PyObject *grid_obj; /* the bytes holding it (borrowed: the cache keeps it alive) */
    double progress;
    long long slots_run;
    double rem; /* remaining declared epochs, max(num_epochs - progress, 0) */
    long long w, p;
    int pos; /* index in the input order */
} Job;

typedef struct {
    Py_ssize_t n;
    long long cap_c, cap_g;
    int rule;
    long long *fc, *fg;
    long long released; /* releases made (SlotCluster.off_rule counts them) */
    /* the nodes of every load level (used CPU + used GPU) as bit sets of node indices,
     * bits[level * words + k]; NULL: searches scan the nodes */
    unsigned long long *bits;
    Py_ssize_t words;
    long long levels;
} Cluster;

typedef struct {
    int job; /* index into jobs */
    int role;
    long long node;
} Dec;

typedef struct {
    Dec *d;
    Py_ssize_t len, cap;
} Log;

static PyObject *S_spec, *S_progress, *S_slots_run, *S_worker, *S_ps, *S_bundle;

/* ------------------------------------------------------------------ the cluster */

static long long cl_scan(const Cluster *c, long long cpu, long long gpu) {
    long long best = -1, best_level = 0;
    const long long *fc = c->fc, *fg = c->fg;
    long long tot = c->cap_c + c->cap_g;
    switch (c->rule) {
    case RULE_LEAST:
        for (Py_ssize_t i = 0; i < c->n; i++) {
            if (fc[i] >= cpu && fg[i] >= gpu) {
                long long level = tot - fc[i] - fg[i];
                if (best < 0 || level < best_level) {
                    if (level == 0) return i; /* an empty node: nothing can be less loaded */
                    best = i;
                    best_level = level;
                }
            }
        }
        return best;
    case RULE_REFERENCE:
        for (Py_ssize_t i = 0; i < c->n; i++) {
            long long level = tot - fc[i] - fg[i];
            if (best < 0 || level < best_level) {
                best = i;
                best_level = level;
            }
        }
        if (best >= 0 && fc[best] >= cpu && fg[best] >= gpu) return best;
        return -1;
    case RULE_FIRST_FIT:
        for (Py_ssize_t i = 0; i < c->n; i++)
            if (fc[i] >= cpu && fg[i] >= gpu) return i;
        return -1;
    default: /* packing */
        for (Py_ssize_t i = 0; i < c->n; i++) {
            if (fc[i] >= cpu && fg[i] >= gpu) {
                long long level = tot - fc[i] - fg[i];
                if (best < 0 || level > best_level) {
                    best = i;
                    best_level = level;
                }
            }
        }
        return best;
    }
}

/* The lowest-index node of load level ``lv`` that holds the task (any node: fit < 0). */
static long long level_first(const Cluster *c, long long lv, long long cpu, long long gpu,
                             int fit) {
    const unsigned long long *row = c->bits + lv * c->words;
    for (Py_ssize_t k = 0; k < c->words; k++) {
        unsigned long long m = row[k];
        while (m) {
            long long i = (long long)k * 64 + __builtin_ctzll(m);
            if (!fit || (c->fc[i] >= cpu && c->fg[i] >= gpu)) return i;
            m &= m - 1;
        }
    }
    return -1;
}

/* The node of the cluster's rule for a (cpu, gpu) task, or -1: the same answer as the scan
 * (cl_scan, the Python rule), from the level sets: least loaded = the lowest level with a
 * node it fits on, its lowest index; reference = the lowest occupied level's lowest index,
 * if it fits there; packing = the highest such level; first fit scans the nodes. */
static long long cl_search(const Cluster *c, long long cpu, long long gpu) {
    if (c->bits == NULL || c->rule == RULE_FIRST_FIT) return cl_scan(c, cpu, gpu);
    switch (c->rule) {
    case RULE_LEAST:
        for (long long lv = 0; lv < c->levels; lv++) {
            long long i = level_first(c, lv, cpu, gpu, 1);
            if (i >= 0) return i;
        }
        return -1;
    case RULE_REFERENCE:
        for (long long lv = 0; lv < c->levels; lv++) {
            long long i = level_first(c, lv, cpu, gpu, 0);
            if (i >= 0) return (c->fc[i] >= cpu && c->fg[i] >= gpu) ? i : -1;
        }
        return -1;
    default: /* packing */
        for (long long lv = c->levels - 1; lv >= 0; lv--) {
            long long i = level_first(c, lv, cpu, gpu, 1);
            if (i >= 0) return i;
        }
        return -1;
    }
}

static long long node_level(const Cluster *c, long long i) {
    return c->cap_c + c->cap_g - c->fc[i] - c->fg[i];
}

static void level_bit(Cluster *c, long long i, int on) {
    unsigned long long *w = c->bits + node_level(c, i) * c->words + i / 64;
    unsigned long long b = 1ull << (i % 64);
    if (on) *w |= b;
    else *w &= ~b;
}

/* Free slots of node ``i`` change by (dc, dg); the level sets follow. */
static void cl_move(Cluster *c, long long i, long long dc, long long dg) {
    if (c->bits != NULL) level_bit(c, i, 0);
    c->fc[i] += dc;
    c->fg[i] += dg;
    if (c->bits != NULL) level_bit(c, i, 1);
}

static long long cl_take(Cluster *c, long long cpu, long long gpu) {
    long long node = cl_search(c, cpu, gpu);
    if (node >= 0) cl_move(c, node, -cpu, -gpu);
    return node;
}

static void cl_release(Cluster *c, long long cpu, long long gpu, long long node) {
    c->released++;
    cl_move(c, node, cpu, gpu);
}

/* The level sets of the nodes' free slots (none when a node is outside its capacity, the
 * cluster is empty or the sets would be large: the searches then scan). */
static int cl_index(Cluster *c) {
    c->bits = NULL;
    c->words = (c->n + 63) / 64;
    c->levels = c->cap_c + c->cap_g + 1;
    if (c->n == 0 || c->levels < 1 || c->levels > 4096 || c->levels * c->words > (1 << 20))
        return 0;
    for (Py_ssize_t i = 0; i < c->n; i++)
        if (c->fc[i] < 0 || c->fg[i] < 0 || c->fc[i] > c->cap_c || c->fg[i] > c->cap_g) return 0;
    c->bits = (unsigned long long *)calloc((size_t)(c->levels * c->words),
                                           sizeof(unsigned long long));
    if (c->bits == NULL) return -1;
    for (Py_ssize_t i = 0; i < c->n; i++) level_bit(c, i, 1);
    return 0;
}

/* ------------------------------------------------------------------ the decision log */

static int log_push(Log *l, int job, int role, long long node) {
    if (l->len == l->cap) {
        Py_ssize_t cap = l->cap ? 2 * l->cap : 64;
        Dec *d = (Dec *)realloc(l->d, (size_t)cap * sizeof(Dec));
        if (d == NULL) return -1;
        l->d = d;
        l->cap = cap;
    }
    l->d[l->len].job = job;
    l->d[l->len].role = role;
    l->d[l->len].node = node;
    l->len++;
    return 0;
}

/* ------------------------------------------------------------------ a binary heap of keys */

/* Keys compare lexicographically: (tier, a, b, c) with a a double, b and c integers (and the
 * job index as payload).  Every key in a heap is unique (the job id is part of it), so the
 * pop order is the one of Python's heapq on the same tuples. */
typedef struct {
    long long tier;
    double a;
    long long b, c;
    int job;
    int role;
} Key;

typedef struct {
    Key *k;
    Py_ssize_t len, cap;
} Heap;

static int key_lt(const Key *x, const Key *y) {
    if (x->tier != y->tier) return x->tier < y->tier;
    if (x->a != y->a) return x->a < y->a;
    if (x->b != y->b) return x->b < y->b;
    if (x->c != y->c) return x->c < y->c;
    return x->role < y->role; /* never reached with unique ids; "ps" < "worker" as in Python */
}

static int heap_push(Heap *h, Key key) {
    if (h->len == h->cap) {
        Py_ssize_t cap = h->cap ? 2 * h->cap : 32;
        Key *k = (Key *)realloc(h->k, (size_t)cap * sizeof(Key));
        if (k == NULL) return -1;
        h->k = k;
        h->cap = cap;
    }
    Py_ssize_t i = h->len++;
    while (i > 0) {
        Py_ssize_t parent = (i - 1) / 2;
        if (!key_lt(&key, &h->k[parent])) break;
        h->k[i] = h->k[parent];
        i = parent;
    }
    h->k[i] = key;
    return 0;
}

static Key heap_pop(Heap *h) {
    Key top = h->k[0];
    Key last = h->k[--h->len];
    Py_ssize_t i = 0, n = h->len;
    while (1) {
        Py_ssize_t l = 2 * i + 1;
        if (l >= n) break;
        Py_ssize_t m = l;
        if (l + 1 < n && key_lt(&h->k[l + 1], &h->k[l])) m = l + 1;
        if (!key_lt(&h->k[m], &last)) break;
        h->k[i] = h->k[m];
        i = m;
    }
    if (n > 0) h->k[i] = last;
    return top;
}

/* ------------------------------------------------------------------ shared arithmetic */

/* slots_to_finish(): remaining / epochs_per_slot; 0 when nothing remains, inf at speed 0 */
static double slots_to_finish(double rem, double eps) {
    if (rem <= 0) return 0.0;
    if (eps <= 0) return INFINITY;
    return rem / eps;
}

/* optimus_utility(): slots saved going from eps_now to eps_next */
static double utility(double rem, double now_eps, double next_eps) {
    double now = slots_to_finish(rem, now_eps), nxt = slots_to_finish(rem, next_eps);
    if (now == nxt) return 0.0;
    return now - nxt;
}

/* _estimated_epochs_per_slot(): its * slot_s / iterations_per_epoch (x speed_factor first if
 * oracle) */
static double est_eps(const Job *j, double its, double slot_s, int oracle) {
    if (oracle) its *= j->r.speed_factor;
    return its * slot_s / j->r.ipe;
}

static double speed_at(const Job *j, long long p, long long w) {
    return j->grid[p * (j->r.maxw + 1) + w];
}

/* Optimus.epochs_per_slot() */
static double optimus_eps(const Job *j, double slot_s, int oracle, long long p, long long w) {
    if (p <= 0 || w <= 0) return 0.0;
    return est_eps(j, speed_at(j, p, w), slot_s, oracle);
}

/* ------------------------------------------------------------------ DRF */

static int run_drf(Job *jobs, Py_ssize_t n, Cluster *c, Log *log, int stop) {
    Heap h = {NULL, 0, 0};
    long long total_cpu = (long long)c->n * c->cap_c, total_gpu = (long long)c->n * c->cap_g;
    for (Py_ssize_t i = 0; i < n; i++) {
        Job *j = &jobs[i];
        if (0 < j->r.maxw && 0 < j->r.maxp) {
            Key k = {0, 0.0, j->r.arrival, j->r.jid, (int)i, 0};
            if (heap_push(&h, k) < 0) goto fail;
        }
    }
    while (h.len) {
        Key k = heap_pop(&h);
        Job *j = &jobs[k.job];
        long long node = cl_take(c, j->r.wc + j->r.pc, j->r.wg + j->r.pg);
        if (node < 0) {
            if (stop) break;
            continue;
        }
        long long w = ++j->w, p = ++j->p;
        if (log_push(log, k.job, ROLE_BUNDLE, node) < 0) goto fail;
        if (w < j->r.maxw && p < j->r.maxp) {
            double share = 0.0;
            if (total_cpu > 0) share = (double)(w * j->r.wc + p * j->r.pc) / (double)total_cpu;
            if (total_gpu > 0) {
                double g = (double)(w * j->r.wg + p * j->r.pg) / (double)total_gpu;
                if (g > share) share = g;
            }
            Key nk = {0, share, j->r.arrival, j->r.jid, k.job, 0};
            if (heap_push(&h, nk) < 0) goto fail;
        }
    }
    free(h.k);
    return 0;
fail:
    free(h.k);
    return -1;
}

/* ------------------------------------------------------------------ sorting by a key */

typedef struct {
    double a;
    long long b, c;
    int job;
} SortKey;

static int sortkey_cmp(const void *x, const void *y) {
    const SortKey *p = (const SortKey *)x, *q = (const SortKey *)y;
    if (p->a != q->a) return p->a < q->a ? -1 : 1;
    if (p->b != q->b) return p->b < q->b ? -1 : 1;
    if (p->c != q->c) return p->c < q->c ? -1 : 1;
    return 0;
}

/* ------------------------------------------------------------------ FixedDemand */

/* workers < 0: each job requests its max_workers (FixedDemand without requests) */
static int run_fixed(Job *jobs, Py_ssize_t n, Cluster *c, Log *log, int stop, int order,
                     long long workers) {
    SortKey *keys = (SortKey *)malloc((size_t)(n ? n : 1) * sizeof(SortKey));
    if (keys == NULL) return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        Job *j = &jobs[i];
        long long d = workers < 0 ? j->r.maxw : (workers < j->r.maxw ? workers : j->r.maxw);
        double a = 0.0;
        if (order == ORDER_SRSF) a = j->rem * (double)d;
        else if (order == ORDER_LAS) a = (double)(j->slots_run * d);
        keys[i].a = a;
        keys[i].b = j->r.arrival;
        keys[i].c = j->r.jid;
        keys[i].job = (int)i;
    }
    qsort(keys, (size_t)n, sizeof(SortKey), sortkey_cmp);
    for (Py_ssize_t r = 0; r < n; r++) {
        Job *j = &jobs[keys[r].job];
        long long d = workers < 0 ? j->r.maxw : (workers < j->r.maxw ? workers : j->r.maxw);
        long long n_ps = d < j->r.maxp ? d : j->r.maxp;
        Py_ssize_t start = log->len;
        int ok = 1;
        for (long long k = 0; k < d; k++) {
            long long node;
            int role;
            if (k < n_ps) {
                node = cl_take(c, j->r.wc + j->r.pc, j->r.wg + j->r.pg);
                role = ROLE_BUNDLE;
            } else {
                node = cl_take(c, j->r.wc, j->r.wg);
                role = ROLE_WORKER;
            }
            if (node < 0) {
                ok = 0;
                break;
            }
            if (log_push(log, keys[r].job, role, node) < 0) {
                free(keys);
                return -1;
            }
        }
        if (ok) {
            j->w = d;
            j->p = n_ps;
            continue;
        }
        for (Py_ssize_t q = start; q < log->len; q++) { /* all or nothing */
            Dec *e = &log->d[q];
            cl_release(c, j->r.wc, j->r.wg, e->node);
            if (e->role == ROLE_BUNDLE) cl_release(c, j->r.pc, j->r.pg, e->node);
        }
        log->len = start;
        if (stop) break;
    }
    free(keys);
    return 0;
}

/* ------------------------------------------------------------------ Optimus' greedy */

typedef struct {
    unsigned char drop_w, drop_p;
} Drop;

static int optimus_push(Heap *h, Job *jobs, int i, const Drop *dropped, double slot_s,
                        int oracle) {
    Job *j = &jobs[i];
    long long w = j->w, p = j->p;
    int can_w = w < j->r.maxw && !dropped[i].drop_w;
    int can_p = p < j->r.maxp && !dropped[i].drop_p;
    if (w == 0 || p == 0) {
        int role = w == 0 ? ROLE_WORKER : ROLE_PS;
        if (role == ROLE_WORKER ? can_w : can_p) {
            Key k = {0, -INFINITY, j->r.arrival, j->r.jid, i, role};
            return heap_push(h, k);
        }
        return 0;
    }
    double rem = j->rem;
    double now = optimus_eps(j, slot_s, oracle, p, w);
    double u_w = can_w ? utility(rem, now, optimus_eps(j, slot_s, oracle, p, w + 1)) : -INFINITY;
    double u_p = can_p ? utility(rem, now, optimus_eps(j, slot_s, oracle, p + 1, w)) : -INFINITY;
    if (!(can_w || can_p)) return 0;
    int role;
    double util;
    if (u_p >= u_w) {
        role = ROLE_PS;
        util = u_p;
    } else {
        role = ROLE_WORKER;
        util = u_w;
    }
    Key k = {1, -util, j->r.arrival, j->r.jid, i, role};
    return heap_push(h, k);
}

/* Optimus.fill() from the jobs' counts; appends to the log. */
static int run_optimus_fill(Job *jobs, Py_ssize_t n, Cluster *c, Log *log, int stop,
                            int oracle, double slot_s) {
    Heap h = {NULL, 0, 0};
    Drop *dropped = (Drop *)calloc((size_t)(n ? n : 1), sizeof(Drop));
    /* per job, the log entries placed here (for the release of a job without a first task):
     * found by scanning the log from fill_start, as the placed list of the Python code */
    SortKey *keys = (SortKey *)malloc((size_t)(n ? n : 1) * sizeof(SortKey));
    Py_ssize_t fill_start = log->len;
    if (dropped == NULL || keys == NULL) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        keys[i].a = 0.0;
        keys[i].b = jobs[i].r.arrival;
        keys[i].c = jobs[i].r.jid;
        keys[i].job = (int)i;
    }
    qsort(keys, (size_t)n, sizeof(SortKey), sortkey_cmp);
    for (Py_ssize_t r = 0; r < n; r++)
        if (optimus_push(&h, jobs, keys[r].job, dropped, slot_s, oracle) < 0) goto fail;
    while (h.len) {
        Key k = heap_pop(&h);
        if (k.tier == 1 && -k.a <= 0) break;
        int i = k.job;
        Job *j = &jobs[i];
        long long cpu = k.role == ROLE_WORKER ? j->r.wc : j->r.pc;
        long long gpu = k.role == ROLE_WORKER ? j->r.wg : j->r.pg;
        long long node = cl_take(c, cpu, gpu);
        if (node < 0) {
            if (stop) break;
            if (k.role == ROLE_WORKER) dropped[i].drop_w = 1;
            else dropped[i].drop_p = 1;
            if (k.tier == 0) { /* no first worker / PS: the job cannot run this slot */
                Py_ssize_t out = 0, removed_before = 0;
                for (Py_ssize_t q = 0; q < log->len; q++) {
                    Dec *e = &log->d[q];
                    if (e->job == i) { /* the Python code filters the whole log */
                        if (q >= fill_start) { /* released: only the tasks placed here */
                            if (e->role == ROLE_WORKER) cl_release(c, j->r.wc, j->r.wg, e->node);
                            else cl_release(c, j->r.pc, j->r.pg, e->node);
                        } else {
                            removed_before++;
                        }
                        continue;
                    }
                    log->d[out++] = *e;
                }
                fill_start -= removed_before;
                log->len = out;
                j->w = j->p = 0;
                continue;
            }
            if (optimus_push(&h, jobs, i, dropped, slot_s, oracle) < 0) goto fail;
            continue;
        }
        if (k.role == ROLE_WORKER) j->w++;
        else j->p++;
        if (log_push(log, i, k.role, node) < 0) goto fail;
        if (optimus_push(&h, jobs, i, dropped, slot_s, oracle) < 0) goto fail;
    }
    free(h.k);
    free(dropped);
    free(keys);
    return 0;
fail:
    free(h.k);
    free(dropped);
    free(keys);
    return -1;
}

/* ------------------------------------------------------------------ EfficientSRTF */

/* EfficientSRTF.target(): the smallest allocation (fewest tasks; ties: faster, then fewer
 * workers) whose speed is >= efficiency x the best over the caps; (0.0, 1, 1) if the best
 * is <= 0.  The caller checked maxw >= 1 and maxp >= 1. */
static void esrtf_target(const Job *j, double eff, double *its, long long *tw, long long *tp) {
    double top = 0.0;
    int first = 1;
    for (long long w = 1; w <= j->r.maxw; w++)
        for (long long p = 1; p <= j->r.maxp; p++) {
            double s = speed_at(j, p, w);
            if (first || s > top) { /* Python's max(): the first of the largest */
                top = s;
                first = 0;
            }
        }
    if (top <= 0) {
        *its = 0.0;
        *tw = 1;
        *tp = 1;
        return;
    }
    double bar = eff * top;
    int found = 0;
    double bs = 0.0;
    long long bw = 0, bp = 0;
    for (long long w = 1; w <= j->r.maxw; w++)
        for (long long p = 1; p <= j->r.maxp; p++) {
            double s = speed_at(j, p, w);
            if (!(s >= bar)) continue;
            /* min by (w + p, -s, w), the first minimal in grid order */
            if (!found || w + p < bw + bp || (w + p == bw + bp && (-s < -bs || (-s == -bs && w < bw)))) {
                found = 1;
                bs = s;
                bw = w;
                bp = p;
            }
        }
    *its = bs;
    *tw = bw;
    *tp = bp;
}

/* esrtf_target() through a memo: a target is a function of the speed grid and the efficiency
 * only.  Open addressing on (grid object, efficiency); an entry holds a reference to its grid
 * (its address cannot be reused while the entry lives); the table is emptied when full. */
#define MEMO_SIZE 4096
typedef struct {
    PyObject *grid; /* NULL: empty */
    double eff, its;
    long long tw, tp;
} Memo;
static Memo memo[MEMO_SIZE];
static Py_ssize_t memo_used;

static void memo_clear(void) {
    for (Py_ssize_t i = 0; i < MEMO_SIZE; i++) {
        Py_CLEAR(memo[i].grid);
    }
    memo_used = 0;
}

static void cached_target(const Job *j, double eff, double *its, long long *tw, long long *tp) {
    unsigned long long bits;
    memcpy(&bits, &eff, sizeof bits);
    unsigned long long h = ((unsigned long long)(size_t)j->grid_obj >> 4) * 0x9E3779B97F4A7C15ull;
    h ^= bits * 0xC2B2AE3D27D4EB4Full;
    Py_ssize_t i = (Py_ssize_t)(h >> 52) & (MEMO_SIZE - 1);
    while (memo[i].grid != NULL) {
        if (memo[i].grid == j->grid_obj && memo[i].eff == eff) {
            *its = memo[i].its;
            *tw = memo[i].tw;
            *tp = memo[i].tp;
            return;
        }
        i = (i + 1) & (MEMO_SIZE - 1);
    }
    esrtf_target(j, eff, its, tw, tp);
    if (memo_used >= MEMO_SIZE / 2) {
        memo_clear();
        i = (Py_ssize_t)(h >> 52) & (MEMO_SIZE - 1);
    }
    memo[i].grid = Py_NewRef(j->grid_obj);
    memo[i].eff = eff;
    memo[i].its = *its;
    memo[i].tw = *tw;
    memo[i].tp = *tp;
    memo_used++;
}

static int run_esrtf(Job *jobs, Py_ssize_t n, Cluster *c, Log *log, double slot_s, double eff,
                     long long head, double head_eff, int backfill, int oracle, int stop,
                     long long first) {
    SortKey *keys = (SortKey *)malloc((size_t)(n ? n : 1) * sizeof(SortKey));
    long long *tws = (long long *)malloc((size_t)(n ? n : 1) * 2 * sizeof(long long));
    if (keys == NULL || tws == NULL) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        Job *j = &jobs[i];
        double its;
        long long tw, tp;
        cached_target(j, eff, &its, &tw, &tp);
        tws[2 * i] = tw;
        tws[2 * i + 1] = tp;
        /* ``first`` (a job id, -1: none) is served before the order */
        keys[i].a = (first >= 0 && j->r.jid == first)
                        ? -INFINITY
                        : slots_to_finish(j->rem, est_eps(j, its, slot_s, oracle));
        keys[i].b = j->r.arrival;
        keys[i].c = j->r.jid;
        keys[i].job = (int)i;
    }
    qsort(keys, (size_t)n, sizeof(SortKey), sortkey_cmp);
    Py_ssize_t shift = (first >= 0 && n > 0 && jobs[keys[0].job].r.jid == first) ? 1 : 0;
    for (Py_ssize_t rank = 0; rank < n; rank++) {
        int i = keys[rank].job;
        Job *j = &jobs[i];
        long long tw = tws[2 * i], tp = tws[2 * i + 1];
        if (rank < shift || (head > 0 && rank - shift < head)) {
            double its;
            cached_target(j, head_eff, &its, &tw, &tp);
        }
        Py_ssize_t start = log->len;
        long long cw = 0, cp = 0;
        while (cw < tw || cp < tp) {
            int worker = cp >= tp || (cw < tw && cw * tp <= cp * tw);
            long long node = worker ? cl_take(c, j->r.wc, j->r.wg) : cl_take(c, j->r.pc, j->r.pg);
            if (node < 0) break;
            if (worker) cw++;
            else cp++;
            if (log_push(log, i, worker ? ROLE_WORKER : ROLE_PS, node) < 0) goto fail;
        }
        int failed = cw < tw || cp < tp;
        if (cw && cp) {
            j->w = cw;
            j->p = cp;
        } else { /* no worker or no PS: the job cannot run, its tasks are released */
            for (Py_ssize_t q = start; q < log->len; q++) {
                Dec *e = &log->d[q];
                if (e->role == ROLE_WORKER) cl_release(c, j->r.wc, j->r.wg, e->node);
                else cl_release(c, j->r.pc, j->r.pg, e->node);
            }
            log->len = start;
            j->w = j->p = 0;
        }
        if (failed && stop) break;
    }
    free(keys);
    free(tws);
    if (backfill) return run_optimus_fill(jobs, n, c, log, stop, oracle, slot_s);
    return 0;
fail:
    free(keys);
    free(tws);
    return -1;
}

/* ------------------------------------------------------------------ the Python entry */

static int read_free(PyObject *list, long long *out, Py_ssize_t n, const char *what) {
    if (!PyList_Check(list) || PyList_GET_SIZE(list) != n) {
        PyErr_Format(PyExc_ValueError, "%s must be a list of %zd ints", what, n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long long v = PyLong_AsLongLong(PyList_GET_ITEM(list, i));
        if (v == -1 && PyErr_Occurred()) return -1;
        out[i] = v;
    }
    return 0;
}

static PyObject *free_list(const long long *v, Py_ssize_t n) {
    PyObject *out = PyList_New(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyLong_FromLongLong(v[i]);
        if (x == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, x);
    }
    return out;
}

/* The set of positions pos_of[fc * stride + fg] of the nodes' free states, as the bits of a
 * Python int (SlotCluster.occupied); None when a position is outside [0, 256) or a state
 * outside pos_of (the caller then builds the whole index). */
static PyObject *occupied_of(const long long *fc, const long long *fg, Py_ssize_t n,
                             PyObject *pos_of, Py_ssize_t stride) {
    enum { WORDS = 4 };
    unsigned long long bits[WORDS] = {0, 0, 0, 0};
    Py_ssize_t npo = PyTuple_GET_SIZE(pos_of);
    for (Py_ssize_t i = 0; i < n; i++) {
        long long st = fc[i] * stride + fg[i];
        if (fc[i] < 0 || fg[i] < 0 || fg[i] >= stride || st >= npo) Py_RETURN_NONE;
        Py_ssize_t p = PyLong_AsSsize_t(PyTuple_GET_ITEM(pos_of, st));
        if (p == -1 && PyErr_Occurred()) return NULL;
        if (p < 0 || p >= 64 * WORDS) Py_RETURN_NONE;
        bits[p / 64] |= 1ull << (p % 64);
    }
    int top = WORDS - 1;
    while (top > 0 && !bits[top]) top--;
    PyObject *acc = PyLong_FromUnsignedLongLong(bits[top]);
    if (acc == NULL) return NULL;
    if (top == 0) return acc;
    PyObject *sh = PyLong_FromLong(64);
    if (sh == NULL) {
        Py_DECREF(acc);
        return NULL;
    }
    for (int k = top - 1; k >= 0 && acc != NULL; k--) { /* acc = acc << 64 | bits[k] */
        PyObject *shifted = PyNumber_Lshift(acc, sh);
        Py_DECREF(acc);
        PyObject *low = shifted ? PyLong_FromUnsignedLongLong(bits[k]) : NULL;
        acc = low ? PyNumber_Or(shifted, low) : NULL;
        Py_XDECREF(shifted);
        Py_XDECREF(low);
    }
    Py_DECREF(sh);
    return acc;
}

PyDoc_STRVAR(allocate_doc,
             "allocate(kind, params, views, cache, free_cpu, free_gpu, cap_cpu, cap_gpu, rule, "
             "slot_s, need_grid[, pos_of, stride])\n\n"
             "One slot of an allocator (see native_alloc.py).  Returns None when a view's job "
             "has no row in ``cache`` (id(spec) -> (spec, row bytes, grid bytes or None)) or "
             "two views share a job id; else (counts dict, decisions list, free_cpu, "
             "free_gpu, releases made), and with ``pos_of`` and ``stride`` (SlotCluster's "
             "index layout) a sixth item: the set (bits of an int) of the positions "
             "``pos_of[fc * stride + fg]`` of the nodes' free states afterwards "
             "(SlotCluster.occupied), or None when a position is out of range.");

/* An int argument (PyArg_ParseTuple's "i"): 0, or -1 with the error set. */
static int arg_int(PyObject *x, int *out) {
    long v = PyLong_AsLong(x);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (v < INT_MIN || v > INT_MAX) {
        PyErr_SetString(PyExc_OverflowError, "an int argument is out of range");
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* An argument of ``type`` (or a subclass: PyArg_ParseTuple's "O!"): 0, or -1 with the
 * error set. */
static int arg_of(PyObject *x, PyTypeObject *type, int pos, const char *fn) {
    if (PyObject_TypeCheck(x, type)) return 0;
    PyErr_Format(PyExc_TypeError, "%s() argument %d must be %s, not %.50s", fn, pos + 1,
                 type->tp_name, Py_TYPE(x)->tp_name);
    return -1;
}

static PyObject *py_allocate(PyObject *self, PyObject *const *argv, Py_ssize_t nargs) {
    int kind, rule, need_grid;
    PyObject *params, *views, *cache, *free_cpu, *free_gpu, *pos_of = NULL;
    long long cap_c, cap_g;
    Py_ssize_t stride = 0;
    double slot_s;
    /* the arguments (METH_FASTCALL: no tuple), checked as "iO!O!O!O!O!LLidp|O!n" would */
    if (nargs != 11 && nargs != 13) {
        PyErr_Format(PyExc_TypeError, "allocate() takes 11 or 13 arguments (%zd given)", nargs);
        return NULL;
    }
    PyTypeObject *types[5] = {&PyTuple_Type, &PyList_Type, &PyDict_Type, &PyList_Type,
                              &PyList_Type};
    for (int k = 0; k < 5; k++)
        if (arg_of(argv[1 + k], types[k], 1 + k, "allocate") < 0) return NULL;
    params = argv[1];
    views = argv[2];
    cache = argv[3];
    free_cpu = argv[4];
    free_gpu = argv[5];
    if (arg_int(argv[0], &kind) < 0) return NULL;
    cap_c = PyLong_AsLongLong(argv[6]);
    if (cap_c == -1 && PyErr_Occurred()) return NULL;
    cap_g = PyLong_AsLongLong(argv[7]);
    if (cap_g == -1 && PyErr_Occurred()) return NULL;
    if (arg_int(argv[8], &rule) < 0) return NULL;
    slot_s = PyFloat_AsDouble(argv[9]);
    if (slot_s == -1.0 && PyErr_Occurred()) return NULL;
    need_grid = PyObject_IsTrue(argv[10]);
    if (need_grid < 0) return NULL;
    if (nargs == 13) {
        if (arg_of(argv[11], &PyTuple_Type, 11, "allocate") < 0) return NULL;
        pos_of = argv[11];
        stride = PyLong_AsSsize_t(argv[12]);
        if (stride == -1 && PyErr_Occurred()) return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(views);
    Py_ssize_t nodes = PyList_GET_SIZE(free_cpu);
    Job *jobs = (Job *)calloc((size_t)(n ? n : 1), sizeof(Job));
    long long *fc = (long long *)malloc((size_t)(nodes ? nodes : 1) * sizeof(long long));
    long long *fg = (long long *)malloc((size_t)(nodes ? nodes : 1) * sizeof(long long));
    Log log = {NULL, 0, 0};
    Cluster c;
    memset(&c, 0, sizeof c);
    PyObject *result = NULL;
    if (jobs == NULL || fc == NULL || fg == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (read_free(free_cpu, fc, nodes, "free_cpu") < 0) goto done;
    if (read_free(free_gpu, fg, nodes, "free_gpu") < 0) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *view = PyList_GET_ITEM(views, i);
        PyObject *spec = PyObject_GetAttr(view, S_spec);
        if (spec == NULL) goto done;
        PyObject *key = PyLong_FromVoidPtr(spec);
        if (key == NULL) {
            Py_DECREF(spec);
            goto done;
        }
        PyObject *entry = PyDict_GetItemWithError(cache, key); /* borrowed */
        Py_DECREF(key);
        if (entry == NULL || !PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 3 ||
            PyTuple_GET_ITEM(entry, 0) != spec) {
            Py_DECREF(spec);
            if (PyErr_Occurred()) goto done;
            result = Py_NewRef(Py_None); /* a miss: the wrapper adds the rows and calls again */
            goto done;
        }
        Py_DECREF(spec); /* the cache holds it */
        PyObject *row = PyTuple_GET_ITEM(entry, 1), *grid = PyTuple_GET_ITEM(entry, 2);
        if (!PyBytes_Check(row) || PyBytes_GET_SIZE(row) != (Py_ssize_t)sizeof(Row)) {
            PyErr_SetString(PyExc_ValueError, "a cached row has the wrong size");
            goto done;
        }
        memcpy(&jobs[i].r, PyBytes_AS_STRING(row), sizeof(Row));
        if (need_grid) {
            if (!PyBytes_Check(grid) || PyBytes_GET_SIZE(grid) != (Py_ssize_t)((jobs[i].r.maxw + 1) * (jobs[i].r.maxp + 1) * (long long)sizeof(double))) {
                PyErr_SetString(PyExc_ValueError, "a cached speed grid has the wrong size");
                goto done;
            }
            jobs[i].grid = (const double *)PyBytes_AS_STRING(grid);
            jobs[i].grid_obj = grid;
        }
        PyObject *prog = PyObject_GetAttr(view, S_progress);
        if (prog == NULL) goto done;
        jobs[i].progress = PyFloat_AsDouble(prog);
        Py_DECREF(prog);
        if (jobs[i].progress == -1.0 && PyErr_Occurred()) goto done;
        if (kind == KIND_FIXED) {
            PyObject *sr = PyObject_GetAttr(view, S_slots_run);
            if (sr == NULL) goto done;
            jobs[i].slots_run = PyLong_AsLongLong(sr);
            Py_DECREF(sr);
            if (jobs[i].slots_run == -1 && PyErr_Occurred()) goto done;
        }
        double rem = jobs[i].r.num_epochs - jobs[i].progress;
        jobs[i].rem = 0.0 > rem ? 0.0 : rem; /* max(rem, 0.0) */
        jobs[i].pos = (int)i;
        for (Py_ssize_t q = 0; q < i; q++) /* a job given twice: the Python path says so */
            if (jobs[q].r.jid == jobs[i].r.jid) {
                result = Py_NewRef(Py_None);
                goto done;
            }
    }
    c.n = nodes;
    c.cap_c = cap_c;
    c.cap_g = cap_g;
    c.rule = rule;
    c.fc = fc;
    c.fg = fg;
    if (cl_index(&c) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    int rc;
    switch (kind) {
    case KIND_DRF: {
        int stop;
        if (!PyArg_ParseTuple(params, "p", &stop)) goto done;
        rc = run_drf(jobs, n, &c, &log, stop);
        break;
    }
    case KIND_FIXED: {
        int stop, order;
        long long workers;
        if (!PyArg_ParseTuple(params, "piL", &stop, &order, &workers)) goto done;
        rc = run_fixed(jobs, n, &c, &log, stop, order, workers);
        break;
    }
    case KIND_OPTIMUS: {
        int stop, oracle;
        if (!PyArg_ParseTuple(params, "pp", &stop, &oracle)) goto done;
        rc = run_optimus_fill(jobs, n, &c, &log, stop, oracle, slot_s);
        break;
    }
    case KIND_ESRTF: {
        int stop, oracle, backfill;
        double eff, head_eff;
        long long head, first;
        if (!PyArg_ParseTuple(params, "dLdpppL", &eff, &head, &head_eff, &backfill, &oracle, &stop,
                              &first))
            goto done;
        rc = run_esrtf(jobs, n, &c, &log, slot_s, eff, head, head_eff, backfill, oracle, stop,
                       first);
        break;
    }
    default:
        PyErr_Format(PyExc_ValueError, "unknown allocator kind %d", kind);
        goto done;
    }
    if (rc < 0) {
        PyErr_NoMemory();
        goto done;
    }
    {
        PyObject *counts = PyDict_New(), *decisions = PyList_New(log.len);
        PyObject *roles[3] = {S_worker, S_ps, S_bundle};
        PyObject *ofc = NULL, *ofg = NULL;
        if (counts == NULL || decisions == NULL) goto build_fail;
        PyObject **ids = (PyObject **)calloc((size_t)(n ? n : 1), sizeof(PyObject *));
        if (ids == NULL) goto build_fail;
        for (Py_ssize_t i = 0; i < n; i++) {
            ids[i] = PyLong_FromLongLong(jobs[i].r.jid);
            PyObject *w = PyLong_FromLongLong(jobs[i].w), *p = PyLong_FromLongLong(jobs[i].p);
            PyObject *v = (w && p) ? PyTuple_Pack(2, w, p) : NULL;
            Py_XDECREF(w);
            Py_XDECREF(p);
            if (ids[i] == NULL || v == NULL || PyDict_SetItem(counts, ids[i], v) < 0) {
                Py_XDECREF(v);
                goto ids_fail;
            }
            Py_DECREF(v);
        }
        for (Py_ssize_t q = 0; q < log.len; q++) {
            Dec *e = &log.d[q];
            PyObject *t = PyTuple_New(3), *node = PyLong_FromLongLong(e->node);
            if (t == NULL || node == NULL) {
                Py_XDECREF(t);
                Py_XDECREF(node);
                goto ids_fail;
            }
            PyTuple_SET_ITEM(t, 0, Py_NewRef(ids[e->job]));
            PyTuple_SET_ITEM(t, 1, Py_NewRef(roles[e->role]));
            PyTuple_SET_ITEM(t, 2, node);
            PyList_SET_ITEM(decisions, q, t);
        }
        for (Py_ssize_t i = 0; i < n; i++) Py_XDECREF(ids[i]);
        free(ids);
        ids = NULL;
        if (0) {
        ids_fail:
            for (Py_ssize_t i = 0; i < n; i++) Py_XDECREF(ids[i]);
            free(ids);
            goto build_fail;
        }
        ofc = free_list(fc, nodes);
        ofg = free_list(fg, nodes);
        if (ofc == NULL || ofg == NULL) goto build_fail;
        PyObject *released = PyLong_FromLongLong(c.released);
        if (released == NULL) goto build_fail;
        if (pos_of == NULL) {
            result = PyTuple_Pack(5, counts, decisions, ofc, ofg, released);
        } else {
            PyObject *occ = occupied_of(fc, fg, nodes, pos_of, stride);
            if (occ != NULL) result = PyTuple_Pack(6, counts, decisions, ofc, ofg, released, occ);
            Py_XDECREF(occ);
        }
        Py_DECREF(released);
    build_fail:
        Py_XDECREF(counts);
        Py_XDECREF(decisions);
        Py_XDECREF(ofc);
        Py_XDECREF(ofg);
    }
done:
    free(c.bits);
    free(jobs);
    free(fc);
    free(fg);
    free(log.d);
    return result;
}

PyDoc_STRVAR(index_doc,
             "index(free_cpu, free_gpu, pos_of, stride, positions)\n\n"
             "SlotCluster.adopt's index: (state, buckets, count, occupied) for the free slots "
             "(pos_of[fc * stride + fg] the position of a node's free state; a position "
             "without a node has no heap: None).");

static PyObject *py_index(PyObject *self, PyObject *args) {
    PyObject *free_cpu, *free_gpu, *pos_of;
    Py_ssize_t stride, npos;
    if (!PyArg_ParseTuple(args, "O!O!O!nn", &PyList_Type, &free_cpu, &PyList_Type, &free_gpu,
                          &PyTuple_Type, &pos_of, &stride, &npos))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(free_cpu), npo = PyTuple_GET_SIZE(pos_of);
    if (PyList_GET_SIZE(free_gpu) != n || npos < 1) {
        PyErr_SetString(PyExc_ValueError, "free_cpu and free_gpu differ in length");
        return NULL;
    }
    PyObject *state = PyList_New(n), *buckets = PyList_New(npos), *count = PyList_New(npos);
    PyObject *occupied = NULL, *result = NULL;
    Py_ssize_t *cnt = (Py_ssize_t *)calloc((size_t)npos, sizeof(Py_ssize_t));
    if (state == NULL || buckets == NULL || count == NULL || cnt == NULL) goto out;
    for (Py_ssize_t b = 0; b < npos; b++) /* no heap (None) where no node is */
        PyList_SET_ITEM(buckets, b, Py_NewRef(Py_None));
    for (Py_ssize_t i = 0; i < n; i++) {
        long long fc = PyLong_AsLongLong(PyList_GET_ITEM(free_cpu, i));
        long long fg = PyLong_AsLongLong(PyList_GET_ITEM(free_gpu, i));
        if (PyErr_Occurred()) goto out;
        long long st = fc * stride + fg;
        if (fc < 0 || fg < 0 || fg >= stride || st >= npo) {
            PyErr_Format(PyExc_ValueError, "node %zd: free state (%lld, %lld) out of range", i,
                         fc, fg);
            goto out;
        }
        PyObject *pos = PyTuple_GET_ITEM(pos_of, st);
        Py_ssize_t p = PyLong_AsSsize_t(pos);
        if (p < 0 || p >= npos) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "position out of range");
            goto out;
        }
        PyList_SET_ITEM(state, i, Py_NewRef(pos));
        PyObject *node = PyLong_FromSsize_t(i);
        if (node == NULL) goto out;
        PyObject *heap = PyList_GET_ITEM(buckets, p);
        if (heap == Py_None) {
            heap = PyList_New(0);
            if (heap == NULL) {
                Py_DECREF(node);
                goto out;
            }
            PyList_SET_ITEM(buckets, p, heap); /* steals; drops the None's reference */
            Py_DECREF(Py_None);
        }
        if (PyList_Append(heap, node) < 0) {
            Py_DECREF(node);
            goto out;
        }
        Py_DECREF(node);
        cnt[p]++;
    }
    occupied = PyLong_FromLong(0);
    if (occupied == NULL) goto out;
    for (Py_ssize_t b = 0; b < npos; b++) {
        PyObject *c = PyLong_FromSsize_t(cnt[b]);
        if (c == NULL) goto out;
        PyList_SET_ITEM(count, b, c);
        if (cnt[b]) {
            PyObject *one = PyLong_FromLong(1), *sh = PyLong_FromSsize_t(b);
            PyObject *bit = (one && sh) ? PyNumber_Lshift(one, sh) : NULL;
            Py_XDECREF(one);
            Py_XDECREF(sh);
            PyObject *o = bit ? PyNumber_Or(occupied, bit) : NULL;
            Py_XDECREF(bit);
            if (o == NULL) goto out;
            Py_SETREF(occupied, o);
        }
    }
    result = PyTuple_Pack(4, state, buckets, count, occupied);
out:
    Py_XDECREF(state);
    Py_XDECREF(buckets);
    Py_XDECREF(count);
    Py_XDECREF(occupied);
    free(cnt);
    return result;
}

PyDoc_STRVAR(check_free_doc,
             "check_free(free_cpu, free_gpu, cap_cpu, cap_gpu)\n\n"
             "SlotCluster.check and the used totals in one pass (SlotSimulator's every-slot "
             "check): (used CPU slots, used GPU slots) when every node's free slots are ints "
             "in [0, capacity]; None otherwise (the Python check then decides and names the "
             "node).");

/* SlotCluster.check and the used totals: 0 and the totals when every node's free slots are
 * exact ints in [0, capacity]; 1 otherwise (nothing raised). */
static int free_totals(PyObject *free_cpu, PyObject *free_gpu, long long cap_c, long long cap_g,
                       long long *used_cpu, long long *used_gpu) {
    Py_ssize_t n = PyList_GET_SIZE(free_cpu);
    if (PyList_GET_SIZE(free_gpu) != n) return 1;
    const long long lim = (long long)1 << 62; /* n * cap below it: the sums cannot overflow */
    if (cap_c < 0 || cap_g < 0 || cap_c >= lim / (n + 1) || cap_g >= lim / (n + 1)) return 1;
    long long used_c = 0, used_g = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyList_GET_ITEM(free_cpu, i), *b = PyList_GET_ITEM(free_gpu, i);
        if (!PyLong_CheckExact(a) || !PyLong_CheckExact(b)) return 1;
        int oa, ob;
        long long fc = PyLong_AsLongLongAndOverflow(a, &oa);
        long long fg = PyLong_AsLongLongAndOverflow(b, &ob);
        if (oa || ob || !(0 <= fc && fc <= cap_c && 0 <= fg && fg <= cap_g)) return 1;
        used_c += cap_c - fc;
        used_g += cap_g - fg;
    }
    *used_cpu = used_c;
    *used_gpu = used_g;
    return 0;
}

static PyObject *py_check_free(PyObject *self, PyObject *args) {
    PyObject *free_cpu, *free_gpu;
    long long cap_c, cap_g, used_c, used_g;
    if (!PyArg_ParseTuple(args, "O!O!LL", &PyList_Type, &free_cpu, &PyList_Type, &free_gpu,
                          &cap_c, &cap_g))
        return NULL;
    if (free_totals(free_cpu, free_gpu, cap_c, cap_g, &used_c, &used_g)) Py_RETURN_NONE;
    return Py_BuildValue("LL", used_c, used_g);
}

/* ------------------------------------------------------------------ the slot transition */

/* SlotSimulator.end_slot up to its ``on_slot`` call (_check_slot's int fast path, the
 * training loop, the utilisation, the reward, the record) and SlotSimulator.active_jobs'
 * views, in C.  simulator.py is the specification (SlotSimulator._run_slot), and the path
 * taken whenever this code answers None.  end_slot works in three passes:
 *   1. validate the cluster, the allocation and every field the loop reads, and sum the used
 *      slots, as _check_slot does: anything _check_slot would refuse, or anything unusual (a
 *      value not an exact int / float / list / 2-tuple, a sum past 64 bits), answers None
 *      before anything is touched;
 *   2. each allocated job's rate (the cache ``r.rates``, else ``sim._rate(r, new)``, stored
 *      in the cache as the Python loop stores it) and epochs, with the same floating-point
 *      operations in the same order: a failing rate (its exception dropped), a non-float
 *      rate, a negative or NaN epoch count answers None, the rates cached so far being those
 *      that the Python loop caches before it raises its error;
 *   3. commit: every _Run field, the simulator's lists and counters, as the Python code
 *      leaves them (only a failed allocation can stop it half-way: MemoryError). */

static PyObject *S_alloc, *S_view, *S_num_changes, *S_progress_r, *S_finish, *S_rates,
    *S_max_workers, *S_max_ps, *S_type, *S_worker_cpu, *S_worker_gpu, *S_ps_cpu, *S_ps_gpu,
    *S_real_num_epochs, *S_num_epochs, *S_workers, *S__active, *S__active_ids, *S_slot_s,
    *S_scaling_overhead_s, *S_cluster, *S_free_cpu, *S_free_gpu, *S_cpu_capacity,
    *S_gpu_capacity, *S_total_cpu, *S_total_gpu, *S__cpu_util, *S__gpu_util, *S__rewards,
    *S__done, *S__rate, *S_t, *S_allocation, *S_epochs, *S_finished, *S_used_cpu, *S_used_gpu,
    *S_reward, *IDLE, *EMPTY;

/* The fields of a _Run (a dataclass with __slots__): read and written at their offsets in
 * the object, as its member descriptors do (a run of another class, or a field without a
 * value, is the Python code's). */
typedef struct {
    PyTypeObject *cls; /* (a reference held) */
    Py_ssize_t spec, progress, alloc, slots_run, num_changes, finish, rates, view;
} RunLayout;

static RunLayout run_layout;

#define FIELD(r, off) (*(PyObject **)((char *)(r) + (off)))

/* The offset of ``cls``'s writable object slot ``name``: 0, or 1 if it has none. */
static int slot_offset(PyTypeObject *cls, PyObject *name, Py_ssize_t *off) {
    PyObject *d = PyObject_GetAttr((PyObject *)cls, name); /* the descriptor itself */
    if (d == NULL) {
        PyErr_Clear();
        return 1;
    }
    int ok = Py_TYPE(d) == &PyMemberDescr_Type;
    if (ok) {
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        ok = m->type == T_OBJECT_EX && !(m->flags & READONLY);
        *off = m->offset;
    }
    Py_DECREF(d);
    return !ok;
}

/* Whether ``r`` is a run whose fields are at known offsets (learning them for its class). */
static int run_ok(PyObject *r) {
    PyTypeObject *cls = Py_TYPE(r);
    if (cls == run_layout.cls) return 1;
    RunLayout l;
    l.cls = cls;
    if (slot_offset(cls, S_spec, &l.spec) || slot_offset(cls, S_progress_r, &l.progress) ||
        slot_offset(cls, S_alloc, &l.alloc) || slot_offset(cls, S_slots_run, &l.slots_run) ||
        slot_offset(cls, S_num_changes, &l.num_changes) ||
        slot_offset(cls, S_finish, &l.finish) || slot_offset(cls, S_rates, &l.rates) ||
        slot_offset(cls, S_view, &l.view))
        return 0;
    Py_INCREF(cls);
    Py_XDECREF(run_layout.cls);
    run_layout = l;
    return 1;
}

/* r.<field> = v (a new reference taken; the old value released), as the descriptor does. */
static void field_set(PyObject *r, Py_ssize_t off, PyObject *v) {
    PyObject *old = FIELD(r, off);
    FIELD(r, off) = Py_NewRef(v);
    Py_XDECREF(old);
}

/* field_set, stealing ``v``; -1 when ``v`` is NULL (a failed allocation). */
static int field_steal(PyObject *r, Py_ssize_t off, PyObject *v) {
    if (v == NULL) return -1;
    field_set(r, off, v);
    Py_DECREF(v);
    return 0;
}

/* What the slot reads of a job's spec (ElasticJob and its JobType, frozen dataclasses): kept
 * per spec in a direct-mapped cache that holds the spec (so that its address names it). */
static PyObject *S_job_id;

typedef struct {
    PyObject *spec;
    PyObject *jid; /* spec.job_id (a reference held by the cache entry) */
    long long maxw, maxp, wc, wg, pc, pg;
    double real, num_epochs;
} SpecRow;

enum { SPEC_CACHE = 4096 };
static SpecRow spec_cache[SPEC_CACHE];

typedef struct {
    PyObject *r, *jid; /* (references held: a rate's Python code runs before the commit) */
    PyObject *newv;    /* the allocation: decided's or IDLE (a reference held) */
    SpecRow row;       /* (row.spec borrowed from spec_ref) */
    PyObject *spec_ref; /* the run's spec, for allocated jobs (a reference held) */
    long long w, p, slots_run, num_changes;
    double progress, epochs, finish;
    int run, changed, finishing, reset;
} SlotJob;

/* An exact int in [0, 2**62) (a count or a demand; sums and products are overflow-checked),
 * else -1 (nothing raised). */
static long long small_count(PyObject *x) {
    if (!PyLong_CheckExact(x)) return -1;
    int over;
    long long v = PyLong_AsLongLongAndOverflow(x, &over);
    if (over || v < 0 || v >= ((long long)1 << 62)) {
        PyErr_Clear();
        return -1;
    }
    return v;
}

/* A float, or an int that a double holds exactly (|x| < 2**53): 1 and the double Python's
 * arithmetic converts it to; 0 when it is neither (nothing raised). */
static int exact_double(PyObject *x, double *out) {
    if (PyFloat_CheckExact(x)) {
        *out = PyFloat_AS_DOUBLE(x);
        return 1;
    }
    if (PyLong_CheckExact(x)) {
        int over;
        long long v = PyLong_AsLongLongAndOverflow(x, &over);
        const long long lim = (long long)1 << 53;
        if (over || v <= -lim || v >= lim) {
            PyErr_Clear();
            return 0;
        }
        *out = (double)v;
        return 1;
    }
    return 0;
}

/* getattr(obj, name) as a small count; -1 when missing or not one (nothing raised). */
static long long attr_count(PyObject *obj, PyObject *name) {
    PyObject *x = PyObject_GetAttr(obj, name);
    if (x == NULL) {
        PyErr_Clear();
        return -1;
    }
    long long v = small_count(x);
    Py_DECREF(x);
    return v;
}

/* getattr(obj, name) as exact_double; 0 when missing or neither (nothing raised). */
static int attr_double(PyObject *obj, PyObject *name, double *out) {
    PyObject *x = PyObject_GetAttr(obj, name);
    if (x == NULL) {
        PyErr_Clear();
        return 0;
    }
    int ok = exact_double(x, out);
    Py_DECREF(x);
    return ok;
}

/* getattr(obj, name) if it is exactly of ``type`` (a new reference), else NULL (nothing
 * raised). */
static PyObject *attr_of(PyObject *obj, PyObject *name, PyTypeObject *type) {
    PyObject *x = PyObject_GetAttr(obj, name);
    if (x == NULL) {
        PyErr_Clear();
        return NULL;
    }
    if (Py_TYPE(x) != type) Py_CLEAR(x);
    return x;
}

static int mul_add(long long *acc, long long a, long long b) {
    long long prod;
    return __builtin_mul_overflow(a, b, &prod) || __builtin_add_overflow(*acc, prod, acc);
}

/* ``a != b`` for two allocations: numerically when both are pairs of exact ints in
 * [0, 2**62) (the usual case), else by Python's comparison; -1 on an error. */
static int alloc_ne(PyObject *a, PyObject *b) {
    if (a == b) return 0;
    if (PyTuple_CheckExact(a) && PyTuple_CheckExact(b) && PyTuple_GET_SIZE(a) == 2 &&
        PyTuple_GET_SIZE(b) == 2) {
        long long a0 = small_count(PyTuple_GET_ITEM(a, 0));
        long long a1 = small_count(PyTuple_GET_ITEM(a, 1));
        long long b0 = small_count(PyTuple_GET_ITEM(b, 0));
        long long b1 = small_count(PyTuple_GET_ITEM(b, 1));
        if (a0 >= 0 && a1 >= 0 && b0 >= 0 && b1 >= 0) return a0 != b0 || a1 != b1;
    }
    return PyObject_RichCompareBool(a, b, Py_NE);
}

/* The spec's row into ``out`` (from the cache, else read and cached): 0, or 1 when a field is
 * out of the ordinary (nothing raised). */
static int spec_row(PyObject *spec, SpecRow *out) {
    size_t h = (size_t)((uintptr_t)spec >> 4);
    SpecRow *e = &spec_cache[(h ^ (h >> 12)) & (SPEC_CACHE - 1)];
    if (e->spec == spec) {
        *out = *e;
        return 0;
    }
    SpecRow row;
    row.spec = spec;
    row.maxw = attr_count(spec, S_max_workers);
    row.maxp = attr_count(spec, S_max_ps);
    if (row.maxw < 0 || row.maxp < 0 || !attr_double(spec, S_real_num_epochs, &row.real) ||
        !attr_double(spec, S_num_epochs, &row.num_epochs))
        return 1;
    PyObject *ty = PyObject_GetAttr(spec, S_type);
    if (ty == NULL) {
        PyErr_Clear();
        return 1;
    }
    row.wc = attr_count(ty, S_worker_cpu);
    row.wg = attr_count(ty, S_worker_gpu);
    row.pc = attr_count(ty, S_ps_cpu);
    row.pg = attr_count(ty, S_ps_gpu);
    Py_DECREF(ty);
    if (row.wc < 0 || row.wg < 0 || row.pc < 0 || row.pg < 0) return 1;
    row.jid = PyObject_GetAttr(spec, S_job_id);
    if (row.jid == NULL) {
        PyErr_Clear();
        return 1;
    }
    PyObject *old = e->spec, *old_jid = e->jid;
    *e = row;
    Py_INCREF(spec);
    Py_XDECREF(old);
    Py_XDECREF(old_jid);
    *out = row;
    return 0;
}

/* Pass 1 for an allocated job (its run checked by run_ok): _check_slot's checks and sums,
 * and what the loop reads.  0: fine; 1: the Python code decides (nothing raised). */
static int slot_validate(SlotJob *j, const RunLayout *L, long long *cpu, long long *gpu) {
    PyObject *r = j->r, *spec = FIELD(r, L->spec), *progress = FIELD(r, L->progress);
    PyObject *finish = FIELD(r, L->finish), *sr = FIELD(r, L->slots_run);
    PyObject *nc = FIELD(r, L->num_changes);
    if (spec == NULL || progress == NULL || finish == NULL || sr == NULL || nc == NULL ||
        !PyFloat_CheckExact(progress) || spec_row(spec, &j->row))
        return 1;
    j->spec_ref = Py_NewRef(spec);
    if (j->w > j->row.maxw || j->p > j->row.maxp) return 1; /* the caps */
    j->progress = PyFloat_AS_DOUBLE(progress);
    if (j->progress > j->row.real || finish != Py_None) return 1; /* "active but finished" */
    if (mul_add(cpu, j->w, j->row.wc) || mul_add(cpu, j->p, j->row.pc) ||
        mul_add(gpu, j->w, j->row.wg) || mul_add(gpu, j->p, j->row.pg))
        return 1;
    j->slots_run = small_count(sr);
    j->num_changes = small_count(nc);
    if (j->slots_run < 0 || j->num_changes < 0) return 1; /* (below 2**62: + 1 fits) */
    if (j->slots_run > 0) { /* new != r.alloc (compared only after a slot run, as in Python) */
        PyObject *prev = FIELD(r, L->alloc);
        if (prev == NULL) return 1;
        int ne = alloc_ne(j->newv, prev);
        if (ne < 0) {
            PyErr_Clear();
            return 1;
        }
        j->changed = ne;
    }
    return 0;
}

static PyObject *S_speed, *S__memo, *S_model, *S_speed_factor, *S_iterations_per_epoch;

/* SlotSimulator._rate(r, new) for a MeasuredSpeed whose memo holds the speed (``memo``: the
 * model's ``_memo``, its ``speed`` method checked to be MeasuredSpeed.speed): ``its =
 * float(memo[(spec.type.model, ps, workers)])``, finite and >= 0, and ``its * speed_factor /
 * iterations_per_epoch`` in Python's order and conversions.  1 and the rate; 0 (nothing
 * raised) when the Python method must run: a memo miss, a value out of the ordinary, the
 * error it raises. */
static int memo_rate(const SlotJob *j, PyObject *memo, double *out) {
    PyObject *spec = j->row.spec, *ty = PyObject_GetAttr(spec, S_type), *model = NULL;
    PyObject *key = NULL;
    int ok = 0;
    double sf;
    long long ipe = ty == NULL ? -1 : attr_count(ty, S_iterations_per_epoch);
    if (ipe <= 0 || ipe >= ((long long)1 << 53) || !attr_double(spec, S_speed_factor, &sf))
        goto out;
    model = PyObject_GetAttr(ty, S_model);
    if (model == NULL || !PyUnicode_CheckExact(model)) goto out;
    key = PyTuple_Pack(3, model, PyTuple_GET_ITEM(j->newv, 1), PyTuple_GET_ITEM(j->newv, 0));
    PyObject *v = key == NULL ? NULL : PyDict_GetItemWithError(memo, key); /* borrowed */
    if (v == NULL || !PyFloat_CheckExact(v)) goto out;
    double its = PyFloat_AS_DOUBLE(v);
    if (!(isfinite(its) && its >= 0)) goto out; /* the Python method raises */
    *out = its * sf / (double)ipe;
    ok = 1;
out:
    PyErr_Clear();
    Py_XDECREF(ty);
    Py_XDECREF(model);
    Py_XDECREF(key);
    return ok;
}

/* Pass 2 for an allocated job: the loop body's arithmetic.  0: fine; 1: the Python code
 * decides (nothing raised; a rate computed and cached stays cached, as in Python).  A rate
 * not cached comes from ``*memo`` (memo_rate) where it can, else from the Python method
 * (``*memo`` is then forgotten for the rest of the slot: Python code ran). */
static int slot_train(SlotJob *j, const RunLayout *L, PyObject *sim, double slot_s,
                      double overhead_s, double keep, long long t, PyObject **memo) {
    double overhead = j->changed ? overhead_s : 0.0;
    PyObject *rates = Py_XNewRef(FIELD(j->r, L->rates)), *cached = NULL;
    if (rates == NULL || !PyDict_CheckExact(rates)) goto back;
    cached = PyDict_GetItemWithError(rates, j->newv); /* cached = r.rates.get(new) */
    if (cached != NULL) {
        Py_INCREF(cached);
    } else { /* cached = r.rates[new] = self._rate(r, new) */
        if (PyErr_Occurred()) goto back;
        double from_memo;
        if (*memo != NULL && memo_rate(j, *memo, &from_memo)) {
            cached = PyFloat_FromDouble(from_memo);
        } else {
            Py_CLEAR(*memo);
            PyObject *call[3] = {sim, j->r, j->newv};
            cached = PyObject_VectorcallMethod(S__rate, call, 3, NULL);
        }
        if (cached == NULL || PyDict_SetItem(rates, j->newv, cached) < 0) goto back;
    }
    if (!PyFloat_CheckExact(cached)) goto back;
    double rate = PyFloat_AS_DOUBLE(cached);
    Py_CLEAR(cached);
    Py_CLEAR(rates);
    double epochs = rate * (slot_s - overhead);
    if (!(epochs >= 0)) return 1; /* Python raises "trained ... epochs" */
    double need = j->row.real - j->progress;
    if (epochs > 0 && epochs >= need * keep) {
        double a = need / rate, b = slot_s - overhead;
        double used_s = overhead + (b < a ? b : a); /* min(need / rate, slot_s - overhead) */
        j->finish = (double)t + used_s / slot_s;
        j->finishing = 1;
        epochs = need;
    }
    j->epochs = epochs;
    return 0;
back:
    PyErr_Clear();
    Py_XDECREF(rates);
    Py_XDECREF(cached);
    return 1;
}

static int set_new(PyObject *obj, PyObject *name, PyObject *value) { /* steals value */
    if (value == NULL) return -1;
    int rc = PyObject_SetAttr(obj, name, value);
    Py_DECREF(value);
    return rc;
}

/* Pass 3 for a job: its writes, as the Python loop makes them. */
static int slot_commit(SlotJob *j, const RunLayout *L, PyObject *epochs_done,
                       PyObject *finished) {
    PyObject *r = j->r;
    if (!j->run) {
        if (j->reset) {
            field_set(r, L->alloc, IDLE);
            field_set(r, L->view, Py_None);
        }
        return 0;
    }
    field_set(r, L->view, Py_None);
    if (j->changed && field_steal(r, L->num_changes, PyLong_FromLongLong(j->num_changes + 1)))
        return -1;
    field_set(r, L->alloc, j->newv);
    if (field_steal(r, L->slots_run, PyLong_FromLongLong(j->slots_run + 1))) return -1;
    if (j->finishing) { /* r.progress = spec.real_num_epochs (the object itself) */
        PyObject *real = PyObject_GetAttr(j->row.spec, S_real_num_epochs);
        if (field_steal(r, L->finish, PyFloat_FromDouble(j->finish)) ||
            field_steal(r, L->progress, real) || PyList_Append(finished, j->jid) < 0)
            return -1;
    } else if (field_steal(r, L->progress, PyFloat_FromDouble(j->progress + j->epochs))) {
        return -1;
    }
    PyObject *e = PyFloat_FromDouble(j->epochs);
    if (e == NULL) return -1;
    int rc = PyDict_SetItem(epochs_done, j->jid, e);
    Py_DECREF(e);
    return rc;
}

/* A dict sized for n items (no resizing while they are added). */
static PyObject *new_dict(Py_ssize_t n) {
#if PY_VERSION_HEX < 0x030D0000
    return _PyDict_NewPresized(n);
#else
    (void)n;
    return PyDict_New();
#endif
}

/* object.__new__(cls) with ``names`` set to ``values`` (n of them) in order past the class's
 * __setattr__: what JobState.of and SlotRecord.of do (the same attributes in the same order;
 * the frozen dataclasses declare no descriptor of these names). */
static PyObject *new_record(PyTypeObject *cls, PyObject **names, PyObject **values, int n) {
    PyObject *v = PyBaseObject_Type.tp_new(cls, EMPTY, NULL);
    for (int k = 0; v != NULL && k < n; k++)
        if (PyObject_GenericSetAttr(v, names[k], values[k]) < 0) Py_CLEAR(v);
    return v;
}

PyDoc_STRVAR(end_slot_doc,
             "end_slot(sim, decided, t, keep, SlotRecord[, MeasuredSpeed.speed])\n\n"
             "SlotSimulator._run_slot (simulator.py; ``keep`` is 1 - the completion tolerance) "
             "of slot ``t`` for ``decided``: its SlotRecord, the runs, utilisation, rewards "
             "and finished count of ``sim`` updated, or None, nothing changed (but the rates "
             "cached that the Python loop caches too), when the Python code must decide: an "
             "error to raise, a value it handles otherwise.  With MeasuredSpeed.speed, a rate "
             "not cached yet is read from the memo of ``sim.speed`` when it is a MeasuredSpeed "
             "(not overridden) that has it (SlotSimulator._rate's arithmetic), else _rate runs.");

/* The memo of ``sim.speed`` when its ``speed`` method is ``speed_func`` (MeasuredSpeed.speed,
 * bound to it: no override), a new reference; else NULL (nothing raised). */
static PyObject *speed_memo(PyObject *sim, PyObject *speed_func) {
    PyObject *speed = PyObject_GetAttr(sim, S_speed), *method = NULL, *memo = NULL;
    if (speed != NULL) method = PyObject_GetAttr(speed, S_speed);
    if (method != NULL && PyMethod_Check(method) && PyMethod_GET_FUNCTION(method) == speed_func &&
        PyMethod_GET_SELF(method) == speed)
        memo = attr_of(speed, S__memo, &PyDict_Type);
    PyErr_Clear();
    Py_XDECREF(speed);
    Py_XDECREF(method);
    return memo;
}

static PyObject *py_end_slot(PyObject *self, PyObject *const *argv, Py_ssize_t nargs) {
    PyObject *sim, *decided, *t_obj, *speed_func = NULL, *memo = NULL;
    PyTypeObject *record_cls;
    double keep;
    /* the arguments (METH_FASTCALL), checked as "OO!O!dO!|O" would */
    if (nargs != 5 && nargs != 6) {
        PyErr_Format(PyExc_TypeError, "end_slot() takes 5 or 6 arguments (%zd given)", nargs);
        return NULL;
    }
    if (arg_of(argv[1], &PyDict_Type, 1, "end_slot") < 0 ||
        arg_of(argv[2], &PyLong_Type, 2, "end_slot") < 0 ||
        arg_of(argv[4], &PyType_Type, 4, "end_slot") < 0)
        return NULL;
    sim = argv[0];
    decided = argv[1];
    t_obj = argv[2];
    keep = PyFloat_AsDouble(argv[3]);
    if (keep == -1.0 && PyErr_Occurred()) return NULL;
    record_cls = (PyTypeObject *)argv[4];
    if (nargs == 6) speed_func = argv[5];
    PyObject *active = NULL, *ids = NULL, *spec = NULL, *cluster = NULL, *free_cpu = NULL,
             *free_gpu = NULL, *lists[3] = {NULL, NULL, NULL}, *result = NULL,
             *allocation = NULL, *epochs_done = NULL, *finished = NULL, *fin = NULL;
    enum { SLOT_STACK = 64 };
    SlotJob stack_jobs[SLOT_STACK], *jobs = NULL;
    RunLayout layout = {NULL, 0, 0, 0, 0, 0, 0, 0, 0};
    Py_ssize_t n = 0;
    int back = 1;
    long long t = small_count(t_obj), used_c, used_g;
    double slot_s, overhead_s;
    /* the simulator's state: anything unusual is the Python code's */
    active = attr_of(sim, S__active, &PyList_Type);
    ids = attr_of(sim, S__active_ids, &PyList_Type);
    spec = PyObject_GetAttr(sim, S_spec);
    cluster = PyObject_GetAttr(sim, S_cluster);
    if (t < 0 || !active || !ids || !spec || !cluster || !PyDict_CheckExact(decided)) goto out;
    n = PyList_GET_SIZE(active);
    if (PyList_GET_SIZE(ids) != n || !attr_double(spec, S_slot_s, &slot_s) ||
        !attr_double(sim, S_scaling_overhead_s, &overhead_s))
        goto out;
    free_cpu = attr_of(cluster, S_free_cpu, &PyList_Type);
    free_gpu = attr_of(cluster, S_free_gpu, &PyList_Type);
    long long cap_c = attr_count(cluster, S_cpu_capacity);
    long long cap_g = attr_count(cluster, S_gpu_capacity);
    long long tot_c = attr_count(cluster, S_total_cpu), tot_g = attr_count(cluster, S_total_gpu);
    long long done = attr_count(sim, S__done);
    PyObject *names[3] = {S__cpu_util, S__gpu_util, S__rewards};
    for (int k = 0; k < 3; k++)
        if ((lists[k] = attr_of(sim, names[k], &PyList_Type)) == NULL) goto out;
    const long long exact = (long long)1 << 53; /* int / int is the doubles' division below */
    if (!free_cpu || !free_gpu || cap_c < 0 || cap_g < 0 || tot_c <= 0 || tot_c > exact ||
        tot_g < 0 || tot_g > exact || done < 0 ||
        free_totals(free_cpu, free_gpu, cap_c, cap_g, &used_c, &used_g) || used_c > exact ||
        used_g > exact)
        goto out;
    jobs = n <= SLOT_STACK ? stack_jobs : (SlotJob *)malloc((size_t)n * sizeof(SlotJob));
    if (jobs != NULL) memset(jobs, 0, (size_t)n * sizeof(SlotJob));
    if (jobs == NULL) {
        back = 0;
        PyErr_NoMemory();
        goto out;
    }
    /* pass 1: _check_slot; every run of one class of known layout (held for the call) */
    long long cpu = 0, gpu = 0;
    Py_ssize_t matched = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyList_GET_ITEM(active, i);
        if (!run_ok(r) || (i > 0 && Py_TYPE(r) != layout.cls)) goto out;
        if (i == 0) {
            layout = run_layout;
            Py_INCREF(layout.cls);
        }
        SlotJob *j = &jobs[i];
        j->r = Py_NewRef(r);
        j->jid = Py_NewRef(PyList_GET_ITEM(ids, i));
        PyObject *v = PyDict_GetItemWithError(decided, j->jid); /* borrowed */
        if (v == NULL && PyErr_Occurred()) goto out;
        j->newv = Py_NewRef(v != NULL ? v : IDLE);
        if (v != NULL) {
            matched++;
            if (!PyTuple_CheckExact(v) || PyTuple_GET_SIZE(v) != 2) goto out;
            j->w = small_count(PyTuple_GET_ITEM(v, 0));
            j->p = small_count(PyTuple_GET_ITEM(v, 1));
            if (j->w < 0 || j->p < 0) goto out;
            if (j->w || j->p) {
                j->run = 1;
                if (slot_validate(j, &layout, &cpu, &gpu)) goto out;
                continue;
            }
            Py_SETREF(j->newv, Py_NewRef(IDLE)); /* (0, 0): the idle allocation */
        }
        /* not allocated: ``if r.alloc != idle`` */
        PyObject *prev = FIELD(r, layout.alloc);
        if (prev == NULL) goto out;
        j->reset = alloc_ne(prev, IDLE);
        if (j->reset < 0) goto out;
    }
    /* every decided job active (active ids are distinct), and the cluster holds the tasks */
    if (matched != PyDict_GET_SIZE(decided) || cpu != used_c || gpu != used_g) goto out;
    /* pass 2: the rates and epochs; the reward summed in active order */
    double reward = 0.0;
    if (speed_func != NULL && speed_func != Py_None) memo = speed_memo(sim, speed_func);
    for (Py_ssize_t i = 0; i < n; i++) {
        SlotJob *j = &jobs[i];
        if (!j->run) continue;
        if (slot_train(j, &layout, sim, slot_s, overhead_s, keep, t, &memo)) goto out;
        reward += j->epochs / j->row.num_epochs;
    }
    /* pass 3: commit */
    back = 0;
    allocation = new_dict(n); /* (dict.fromkeys(active_ids) is sized for them too) */
    epochs_done = PyDict_New();
    finished = PyList_New(0);
    if (allocation == NULL || epochs_done == NULL || finished == NULL) goto out;
    for (Py_ssize_t i = 0; i < n; i++)
        if (PyDict_SetItem(allocation, jobs[i].jid, jobs[i].newv) < 0) goto out;
    for (Py_ssize_t i = 0; i < n; i++)
        if (slot_commit(&jobs[i], &layout, epochs_done, finished) < 0) goto out;
    if (PyList_GET_SIZE(finished) &&
        set_new(sim, S__done, PyLong_FromLongLong(done + PyList_GET_SIZE(finished))) < 0)
        goto out;
    {
        double utils[2] = {(double)used_c / (double)tot_c,
                           tot_g ? (double)used_g / (double)tot_g : 0.0};
        for (int k = 0; k < 3; k++) {
            PyObject *x = PyFloat_FromDouble(k < 2 ? utils[k] : reward);
            if (x == NULL || PyList_Append(lists[k], x) < 0) {
                Py_XDECREF(x);
                goto out;
            }
            Py_DECREF(x);
        }
        fin = PyList_AsTuple(finished);
        PyObject *uc = PyLong_FromLongLong(used_c), *ug = PyLong_FromLongLong(used_g);
        PyObject *rw = PyFloat_FromDouble(reward);
        if (fin && uc && ug && rw) {
            PyObject *fields[7] = {S_t, S_allocation, S_epochs, S_finished,
                                   S_used_cpu, S_used_gpu, S_reward};
            PyObject *values[7] = {t_obj, allocation, epochs_done, fin, uc, ug, rw};
            result = new_record(record_cls, fields, values, 7);
        }
        Py_XDECREF(uc);
        Py_XDECREF(ug);
        Py_XDECREF(rw);
    }
out:
    if (back) {
        PyErr_Clear();
        result = Py_NewRef(Py_None);
    }
    for (Py_ssize_t i = 0; jobs != NULL && i < n; i++) {
        Py_XDECREF(jobs[i].r);
        Py_XDECREF(jobs[i].jid);
        Py_XDECREF(jobs[i].newv);
        Py_XDECREF(jobs[i].spec_ref);
    }
    if (jobs != stack_jobs) free(jobs);
    Py_XDECREF(memo);
    Py_XDECREF(layout.cls);
    Py_XDECREF(active);
    Py_XDECREF(ids);
    Py_XDECREF(spec);
    Py_XDECREF(cluster);
    Py_XDECREF(free_cpu);
    Py_XDECREF(free_gpu);
    for (int k = 0; k < 3; k++) Py_XDECREF(lists[k]);
    Py_XDECREF(allocation);
    Py_XDECREF(epochs_done);
    Py_XDECREF(finished);
    Py_XDECREF(fin);
    return result;
}

PyDoc_STRVAR(views_doc,
             "views(active, JobState)\n\n"
             "SlotSimulator.active_jobs: each run's cached view, or a new one (made as "
             "JobState.of makes it, and cached); None when a run is out of the ordinary (the "
             "views made so far stay cached; the Python code does the rest).");

static PyObject *py_views(PyObject *self, PyObject *args) {
    PyObject *active;
    PyTypeObject *cls;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &active, &PyType_Type, &cls)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(active);
    PyObject *out = PyList_New(n);
    if (out == NULL) return NULL;
    PyObject *r = NULL; /* (a reference held while its view is made) */
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_XSETREF(r, Py_NewRef(PyList_GET_ITEM(active, i)));
        if (!run_ok(r)) goto none;
        const RunLayout L = run_layout;
        PyObject *v = FIELD(r, L.view);
        if (v == NULL) goto none;
        if (v == Py_None) { /* JobState.of(spec, progress, alloc[0], alloc[1], slots_run) */
            PyObject *alloc = FIELD(r, L.alloc), *spec = FIELD(r, L.spec);
            PyObject *prog = FIELD(r, L.progress), *sr = FIELD(r, L.slots_run);
            if (alloc == NULL || spec == NULL || prog == NULL || sr == NULL ||
                !PyTuple_CheckExact(alloc) || PyTuple_GET_SIZE(alloc) != 2)
                goto none;
            /* object.__new__(JobState), its __dict__ the five fields in JobState.of's order */
            PyObject *names[5] = {S_spec, S_progress, S_workers, S_ps, S_slots_run};
            PyObject *values[5] = {spec, prog, PyTuple_GET_ITEM(alloc, 0),
                                   PyTuple_GET_ITEM(alloc, 1), sr};
            for (int k = 0; k < 5; k++) Py_INCREF(values[k]); /* (held while they are set) */
            v = new_record(cls, names, values, 5);
            for (int k = 0; k < 5; k++) Py_DECREF(values[k]);
            if (v == NULL) goto fail;
            if (FIELD(r, L.view) != Py_None) { /* (changed meanwhile: Python code ran) */
                Py_DECREF(v);
                goto none;
            }
            field_set(r, L.view, v);
        } else {
            Py_INCREF(v);
        }
        PyList_SET_ITEM(out, i, v);
    }
    Py_XDECREF(r);
    return out;
none:
    Py_XDECREF(r);
    Py_DECREF(out);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(r);
    Py_DECREF(out);
    return NULL;
}

/* ------------------------------------------------------------------ the env's rows */

/* What the slot's observation and the env's slot glue read of a window row (envs/gym/cluster/
 * observation.py's _Row), at the offsets of its slots. */

static PyObject *S_arrival, *S_type_index, *S_progress_epochs;
static PyObject *S_max_w, *S_max_p, *S_iw, *S_ip, *S_ib, *S_open_mask, *S_open_valid;

/* The offsets of the mask's fields of the env's _Row (a slots dataclass), per class. */
typedef struct {
    PyTypeObject *cls; /* (a reference held) */
    Py_ssize_t max_w, max_p, iw, ip, ib, open_mask, open_valid, arrival, type_index;
} RowLayout;

static RowLayout row_layout;

static int row_ok(PyObject *row) {
    PyTypeObject *cls = Py_TYPE(row);
    if (cls == row_layout.cls) return 1;
    RowLayout l;
    l.cls = cls;
    if (slot_offset(cls, S_max_w, &l.max_w) || slot_offset(cls, S_max_p, &l.max_p) ||
        slot_offset(cls, S_iw, &l.iw) || slot_offset(cls, S_ip, &l.ip) ||
        slot_offset(cls, S_ib, &l.ib) || slot_offset(cls, S_open_mask, &l.open_mask) ||
        slot_offset(cls, S_open_valid, &l.open_valid) || slot_offset(cls, S_arrival, &l.arrival) ||
        slot_offset(cls, S_type_index, &l.type_index))
        return 0;
    Py_INCREF(cls);
    Py_XDECREF(row_layout.cls);
    row_layout = l;
    return 1;
}

/* A row field (at ``off``) as a small count, or -1 (unset or not one). */
static long long row_count(PyObject *row, Py_ssize_t off) {
    PyObject *x = FIELD(row, off);
    return x == NULL ? -1 : small_count(x);
}

/* ------------------------------------------------------------------ the slot's observation */

PyDoc_STRVAR(slot_obs_doc,
             "slot_obs(obs, rows, window, t, L, width, stay_scale)\n\n"
             "ObservationMixin._write_slot_obs's base columns (envs/gym/cluster/observation.py) "
             "into the float32 buffer ``obs``: zeros, then per window job j the stay and "
             "remaining columns and the type's one-hot at row j (the same double arithmetic, "
             "rounded to float32 by the same C cast as the memoryview's item write).  True, or "
             "None, nothing written, when the Python code must do it (a value out of the "
             "ordinary, an index past the row, a division by zero: its error).");

static PyObject *py_slot_obs(PyObject *self, PyObject *const *argv, Py_ssize_t nargs) {
    PyObject *buf, *rows, *window;
    long long t, L, width;
    double stay_scale;
    /* the arguments (METH_FASTCALL), checked as "OO!O!LLLd" would */
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError, "slot_obs() takes 7 arguments (%zd given)", nargs);
        return NULL;
    }
    if (arg_of(argv[1], &PyList_Type, 1, "slot_obs") < 0 ||
        arg_of(argv[2], &PyList_Type, 2, "slot_obs") < 0)
        return NULL;
    buf = argv[0];
    rows = argv[1];
    window = argv[2];
    long long ints[3];
    for (int k = 0; k < 3; k++) {
        ints[k] = PyLong_AsLongLong(argv[3 + k]);
        if (ints[k] == -1 && PyErr_Occurred()) return NULL;
    }
    t = ints[0];
    L = ints[1];
    width = ints[2];
    stay_scale = PyFloat_AsDouble(argv[6]);
    if (stay_scale == -1.0 && PyErr_Occurred()) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(rows);
    if (PyList_GET_SIZE(window) != n || L < 0 || width < L + 2 || t < 0 ||
        t >= ((long long)1 << 53) || !(stay_scale != 0))
        Py_RETURN_NONE;
    Py_buffer view;
    if (PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *result = Py_None;
    enum { OBS_STACK = 64 };
    double stack_vals[2 * OBS_STACK], *vals = stack_vals;
    long long stack_types[OBS_STACK], *types = stack_types;
    if (view.itemsize != 4 || view.format == NULL || strcmp(view.format, "f") != 0 ||
        view.len / 4 < n * width)
        goto out;
    if (n > OBS_STACK) {
        vals = (double *)malloc((size_t)n * 2 * sizeof(double));
        types = (long long *)malloc((size_t)n * sizeof(long long));
        if (vals == NULL || types == NULL) {
            result = NULL;
            PyErr_NoMemory();
            goto out;
        }
    }
    /* pass 1: every value, as the Python loop computes it */
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *row = PyList_GET_ITEM(rows, j), *v = PyList_GET_ITEM(window, j);
        long long arrival, ty;
        if (row_ok(row)) { /* the env's _Row: its fields at their offsets */
            arrival = row_count(row, row_layout.arrival);
            ty = row_count(row, row_layout.type_index);
        } else {
            arrival = attr_count(row, S_arrival);
            ty = attr_count(row, S_type_index);
        }
        if (arrival < 0 || arrival >= ((long long)1 << 53) || ty < 0 || ty >= width) goto out;
        double progress, num_epochs;
        PyObject *spec = PyObject_GetAttr(v, S_spec);
        if (spec == NULL) {
            PyErr_Clear();
            goto out;
        }
        SpecRow cached; /* (num_epochs from the spec cache where it holds the spec) */
        int ok = spec_row(spec, &cached) == 0;
        if (ok) num_epochs = cached.num_epochs;
        else ok = attr_double(spec, S_num_epochs, &num_epochs);
        Py_DECREF(spec);
        if (!ok || !attr_double(v, S_progress_epochs, &progress) || num_epochs == 0) goto out;
        double stay = (double)(t - arrival) / stay_scale; /* (t - row.arrival) / STAY_SCALE */
        double rem = 1.0 - progress / num_epochs;
        if (rem < 0.0) rem = 0.0;
        vals[2 * j] = stay > 1.0 ? 1.0 : stay;
        vals[2 * j + 1] = rem > 1.0 ? 1.0 : rem;
        types[j] = ty;
    }
    /* pass 2: the writes (fill(0.0), then row by row in the Python loop's order) */
    float *obs = (float *)view.buf;
    memset(obs, 0, (size_t)view.len);
    for (Py_ssize_t j = 0; j < n; j++) {
        float *base = obs + j * width;
        base[L] = (float)vals[2 * j];
        base[L + 1] = (float)vals[2 * j + 1];
        base[types[j]] = 1.0f;
    }
    result = Py_True;
out:
    if (vals != stack_vals) free(vals);
    if (types != stack_types) free(types);
    PyBuffer_Release(&view);
    return Py_XNewRef(result);
}

/* ------------------------------------------------------------------ the env's slot glue */

/* ClusterEnv's per-slot bookkeeping of its window (envs/gym/cluster/env.py and masks.py, the
 * specification; tests/sim/elastic/test_native_slot.py): the rows and counts of a new slot,
 * the counts an allocator planned, the decided allocation of the slot's end, and whether an
 * action is still valid.  Each checks everything it reads first and writes nothing but its
 * result, or answers None (nothing written) so that the Python code runs (and raises its
 * errors). */

/* The counts ``c`` of a window row (an exact list of two small counts) into w, p; 0 if not. */
static int pair_counts(PyObject *c, long long *w, long long *p) {
    if (!PyList_CheckExact(c) || PyList_GET_SIZE(c) != 2) return 0;
    *w = small_count(PyList_GET_ITEM(c, 0));
    *p = small_count(PyList_GET_ITEM(c, 1));
    return *w >= 0 && *p >= 0;
}

PyDoc_STRVAR(open_rows_doc,
             "open_rows(window, static)\n\n"
             "The window's bookkeeping of a new slot (ClusterEnv._open_next_slot, "
             "_build_slot_cache and MaskMixin._open_mask): ``({v.spec.job_id: [0, 0] for v in "
             "window}, rows = [static[v.spec.job_id] for v in window], list of the dict's "
             "values, b''.join([row.open_mask for row in rows]), sum([row.open_valid for row "
             "in rows]))``, or None when the Python code must do it (a job id missing from "
             "``static``, an attribute missing, a value out of the ordinary).");

static PyObject *py_open_rows(PyObject *self, PyObject *args) {
    PyObject *window, *stat;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &window, &PyDict_Type, &stat)) return NULL;
    if (!PyDict_CheckExact(stat)) Py_RETURN_NONE;
    Py_ssize_t n = PyList_GET_SIZE(window);
    PyObject *alloc = new_dict(n), *rows = PyList_New(n), *counts = NULL, *out = NULL;
    PyObject *mask = NULL, *valid = NULL;
    long long n_valid = 0;
    if (alloc == NULL || rows == NULL) goto fail;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *v = PyList_GET_ITEM(window, j);
        PyObject *spec = PyObject_GetAttr(v, S_spec);
        if (spec == NULL) goto none;
        SpecRow cached; /* (the job id from the spec cache where it holds the spec) */
        PyObject *jid = spec_row(spec, &cached) == 0 ? Py_NewRef(cached.jid)
                                                     : PyObject_GetAttr(spec, S_job_id);
        Py_DECREF(spec);
        if (jid == NULL) goto none;
        if (!PyLong_CheckExact(jid)) { /* (a hash or an equality of its own: Python's) */
            Py_DECREF(jid);
            goto none;
        }
        PyObject *row = PyDict_GetItemWithError(stat, jid); /* borrowed */
        PyObject *om = row != NULL && row_ok(row) ? FIELD(row, row_layout.open_mask) : NULL;
        long long ov = row != NULL && om != NULL ? row_count(row, row_layout.open_valid) : -1;
        if (ov < 0 || ov > 3 || !PyBytes_CheckExact(om) || PyBytes_GET_SIZE(om) != 3 ||
            (j > 0 && Py_TYPE(row) != Py_TYPE(PyList_GET_ITEM(rows, 0))))
            row = NULL; /* (one row class: the layout read below is the first row's) */
        else
            n_valid += ov;
        PyObject *c = row == NULL ? NULL : PyList_New(2);
        if (c == NULL) {
            Py_DECREF(jid);
            goto none;
        }
        PyList_SET_ITEM(c, 0, PyLong_FromLong(0));
        PyList_SET_ITEM(c, 1, PyLong_FromLong(0));
        int rc = PyDict_SetItem(alloc, jid, c);
        Py_DECREF(jid);
        Py_DECREF(c);
        if (rc < 0) goto fail;
        PyList_SET_ITEM(rows, j, Py_NewRef(row));
    }
    counts = PyDict_Values(alloc);
    mask = PyBytes_FromStringAndSize(NULL, 3 * n);
    valid = PyLong_FromLongLong(n_valid);
    if (counts == NULL || mask == NULL || valid == NULL) goto fail;
    for (Py_ssize_t j = 0; j < n; j++)
        memcpy(PyBytes_AS_STRING(mask) + 3 * j,
               PyBytes_AS_STRING(FIELD(PyList_GET_ITEM(rows, j), row_layout.open_mask)), 3);
    out = PyTuple_Pack(5, alloc, rows, counts, mask, valid);
fail:
    Py_XDECREF(counts);
    Py_XDECREF(mask);
    Py_XDECREF(valid);
    Py_XDECREF(alloc);
    Py_XDECREF(rows);
    return out;
none:
    PyErr_Clear();
    Py_DECREF(alloc);
    Py_DECREF(rows);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(set_counts_doc,
             "set_counts(alloc, target)\n\n"
             "``for jid, c in alloc.items(): c[0], c[1] = target[jid]`` (ClusterEnv.plan_slot) "
             "for exact lists and pairs: True, or None, nothing written, when the Python code "
             "must do it (a job missing from ``target``, a value out of the ordinary).");

static PyObject *py_set_counts(PyObject *self, PyObject *args) {
    PyObject *alloc, *target, *jid, *c;
    if (!PyArg_ParseTuple(args, "O!O!", &PyDict_Type, &alloc, &PyDict_Type, &target))
        return NULL;
    if (!PyDict_CheckExact(alloc) || !PyDict_CheckExact(target)) Py_RETURN_NONE;
    Py_ssize_t pos = 0;
    while (PyDict_Next(alloc, &pos, &jid, &c)) { /* check everything first */
        if (!PyLong_CheckExact(jid) || !PyList_CheckExact(c) || PyList_GET_SIZE(c) != 2)
            Py_RETURN_NONE;
        PyObject *v = PyDict_GetItemWithError(target, jid);
        if (v == NULL) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        if (!PyTuple_CheckExact(v) || PyTuple_GET_SIZE(v) != 2) Py_RETURN_NONE;
    }
    pos = 0;
    while (PyDict_Next(alloc, &pos, &jid, &c)) { /* (no Python code runs in between) */
        PyObject *v = PyDict_GetItem(target, jid);
        PyObject *w = Py_NewRef(PyTuple_GET_ITEM(v, 0)), *p = Py_NewRef(PyTuple_GET_ITEM(v, 1));
        PyList_SetItem(c, 0, w); /* (steals; the old items are ints) */
        PyList_SetItem(c, 1, p);
    }
    Py_RETURN_TRUE;
}

PyDoc_STRVAR(decided_doc,
             "decided(alloc)\n\n"
             "``{jid: (c[0], c[1]) for jid, c in alloc.items()}`` (ClusterEnv._close_slot) for "
             "exact lists of two items, else None (the Python code does it).");

static PyObject *py_decided(PyObject *self, PyObject *args) {
    PyObject *alloc, *jid, *c;
    if (!PyArg_ParseTuple(args, "O!", &PyDict_Type, &alloc)) return NULL;
    if (!PyDict_CheckExact(alloc)) Py_RETURN_NONE;
    Py_ssize_t pos = 0;
    while (PyDict_Next(alloc, &pos, &jid, &c))
        if (!PyLong_CheckExact(jid) || !PyList_CheckExact(c) || PyList_GET_SIZE(c) != 2)
            Py_RETURN_NONE;
    PyObject *out = new_dict(PyDict_GET_SIZE(alloc));
    if (out == NULL) return NULL;
    pos = 0;
    while (PyDict_Next(alloc, &pos, &jid, &c)) {
        PyObject *pair = PyTuple_Pack(2, PyList_GET_ITEM(c, 0), PyList_GET_ITEM(c, 1));
        if (pair == NULL || PyDict_SetItem(out, jid, pair) < 0) {
            Py_XDECREF(pair);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(pair);
    }
    return out;
}

PyDoc_STRVAR(any_valid_doc,
             "any_valid(fits, rows, counts)\n\n"
             "The mask's rule on every window row (ClusterEnv._any_valid's loop, the fit state "
             "``fits`` current): whether some worker, PS or bundle action is valid; None when "
             "the Python code must decide (a length or value out of the ordinary).");

static PyObject *py_any_valid(PyObject *self, PyObject *args) {
    PyObject *fits, *rows, *counts;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyList_Type, &fits, &PyList_Type, &rows,
                          &PyList_Type, &counts))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(rows), nf = PyList_GET_SIZE(fits);
    if (PyList_GET_SIZE(counts) != n) Py_RETURN_NONE;
    for (Py_ssize_t k = 0; k < nf; k++) {
        PyObject *f = PyList_GET_ITEM(fits, k);
        if (f != Py_True && f != Py_False) Py_RETURN_NONE;
    }
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *row = PyList_GET_ITEM(rows, j);
        long long w, p;
        if (!row_ok(row) || !pair_counts(PyList_GET_ITEM(counts, j), &w, &p)) Py_RETURN_NONE;
        long long max_w = row_count(row, row_layout.max_w), max_p = row_count(row, row_layout.max_p);
        long long iw = row_count(row, row_layout.iw), ip = row_count(row, row_layout.ip);
        long long ib = row_count(row, row_layout.ib);
        if (max_w < 0 || max_p < 0 || iw < 0 || iw >= nf || ip < 0 || ip >= nf || ib < 0 ||
            ib >= nf)
            Py_RETURN_NONE;
        int w_ok = w < max_w, p_ok = p < max_p;
        if ((w_ok && PyList_GET_ITEM(fits, iw) == Py_True) ||
            (p_ok && (PyList_GET_ITEM(fits, ip) == Py_True ||
                      (w_ok && PyList_GET_ITEM(fits, ib) == Py_True))))
            Py_RETURN_TRUE; /* (the rows before checked, as the Python loop reads them) */
    }
    Py_RETURN_FALSE;
}

/* ------------------------------------------------------------------ the plan observation */

static PyObject *S_J, *S__num_jobs, *S__window, *S__views, *S__t, *S_sim, *S_last_utilisation,
    *S__finished;

/* getattr(obj, name) as an exact int in [0, 2**53) (a double holds it exactly), or -1
 * (nothing raised). */
static long long attr_exact(PyObject *obj, PyObject *name) {
    long long v = attr_count(obj, name);
    return v >= ((long long)1 << 53) ? -1 : v;
}

/* len(getattr(obj, name)) of an exact list, or -1 (nothing raised). */
static Py_ssize_t attr_list_len(PyObject *obj, PyObject *name) {
    PyObject *x = attr_of(obj, name, &PyList_Type);
    Py_ssize_t n = x == NULL ? -1 : PyList_GET_SIZE(x);
    Py_XDECREF(x);
    return n;
}

PyDoc_STRVAR(plan_obs_doc,
             "plan_obs(out, inner, env)\n\n"
             "SlotPlanner.observe (envs/gym/plan_env.py) into the float32 array ``out``: the "
             "float32 ``inner`` observation, then the plan's global features of ``env`` (the "
             "same double arithmetic, clipped to [0, 1], rounded to float32 by the same C "
             "cast); True, or None, nothing written, when the Python code must do it.");

static PyObject *py_plan_obs(PyObject *self, PyObject *args) {
    PyObject *out_obj, *inner_obj, *env, *sim = NULL, *last = NULL, *result = Py_None;
    if (!PyArg_ParseTuple(args, "OOO", &out_obj, &inner_obj, &env)) return NULL;
    long long J = attr_exact(env, S_J), num_jobs = attr_exact(env, S__num_jobs);
    long long t = attr_exact(env, S__t), finished = attr_exact(env, S__finished);
    Py_ssize_t window = attr_list_len(env, S__window), views = attr_list_len(env, S__views);
    double u_cpu = 0.0, u_gpu = 0.0;
    int have_last = 0;
    if (J <= 0 || num_jobs < 0 || t < 0 || finished < 0 || window < 0 || views < window)
        goto done;
    sim = PyObject_GetAttr(env, S_sim);
    if (sim == NULL || sim == Py_None) goto done; /* (Python: _require_sim raises) */
    last = PyObject_GetAttr(sim, S_last_utilisation);
    if (last == NULL) goto done;
    if (last != Py_None) {
        if (!PyTuple_CheckExact(last) || PyTuple_GET_SIZE(last) != 2 ||
            !PyFloat_CheckExact(PyTuple_GET_ITEM(last, 0)) ||
            !PyFloat_CheckExact(PyTuple_GET_ITEM(last, 1)))
            goto done;
        u_cpu = PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(last, 0));
        u_gpu = PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(last, 1));
        have_last = 1;
    }
    Py_buffer out, inner;
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        goto done;
    if (PyObject_GetBuffer(inner_obj, &inner, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&out);
        goto done;
    }
    if (out.itemsize == 4 && inner.itemsize == 4 && out.format != NULL && inner.format != NULL &&
        strcmp(out.format, "f") == 0 && strcmp(inner.format, "f") == 0 && out.ndim == 1 &&
        inner.ndim == 1 && out.len == inner.len + 6 * 4 && out.buf != inner.buf) {
        /* (the Python code's order: the features in doubles, then the writes) */
        long long n_jobs = num_jobs > 1 ? num_jobs : 1; /* max(num_jobs, 1) */
        double td = (double)t, beyond = (double)(views - window) / (double)J;
        double feats[6] = {
            (double)window / (double)J,
            beyond < 1.0 ? beyond : 1.0, /* min(1.0, beyond / J) */
            have_last ? 1.0 - u_gpu : 1.0,
            have_last ? 1.0 - u_cpu : 1.0,
            td / (td + 100.0),
            (double)finished / (double)n_jobs,
        };
        float *o = (float *)out.buf;
        Py_ssize_t n = inner.len / 4;
        memcpy(o, inner.buf, (size_t)inner.len);
        for (int k = 0; k < 6; k++) {
            double x = feats[k];
            o[n + k] = (float)(x < 0.0 ? 0.0 : x > 1.0 ? 1.0 : x);
        }
        result = Py_True;
    }
    PyBuffer_Release(&inner);
    PyBuffer_Release(&out);
done:
    PyErr_Clear();
    Py_XDECREF(sim);
    Py_XDECREF(last);
    return Py_NewRef(result);
}

static PyMethodDef methods[] = {{"allocate", (PyCFunction)(void (*)(void))py_allocate, METH_FASTCALL,
                                 allocate_doc},
                                {"index", py_index, METH_VARARGS, index_doc},
                                {"check_free", py_check_free, METH_VARARGS, check_free_doc},
                                {"end_slot", (PyCFunction)(void (*)(void))py_end_slot, METH_FASTCALL,
                                 end_slot_doc},
                                {"views", py_views, METH_VARARGS, views_doc},
                                {"slot_obs", (PyCFunction)(void (*)(void))py_slot_obs, METH_FASTCALL,
                                 slot_obs_doc},
                                {"open_rows", py_open_rows, METH_VARARGS, open_rows_doc},
                                {"set_counts", py_set_counts, METH_VARARGS, set_counts_doc},
                                {"decided", py_decided, METH_VARARGS, decided_doc},
                                {"any_valid", py_any_valid, METH_VARARGS, any_valid_doc},
                                {"plan_obs", py_plan_obs, METH_VARARGS, plan_obs_doc},
                                {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_alloc_native",
                                       "Native slot allocators (see native_alloc.py).", -1,
                                       methods};

PyMODINIT_FUNC PyInit__alloc_native(void) {
    S_spec = PyUnicode_InternFromString("spec");
    S_progress = PyUnicode_InternFromString("progress_epochs");
    S_slots_run = PyUnicode_InternFromString("slots_run");
    S_worker = PyUnicode_InternFromString("worker");
    S_ps = PyUnicode_InternFromString("ps");
    S_bundle = PyUnicode_InternFromString("bundle");
    if (!S_spec || !S_progress || !S_slots_run || !S_worker || !S_ps || !S_bundle) return NULL;
    struct {
        PyObject **var;
        const char *name;
    } names[] = {
        {&S_alloc, "alloc"},
        {&S_view, "_view"},
        {&S_num_changes, "num_changes"},
        {&S_progress_r, "progress"},
        {&S_finish, "finish"},
        {&S_rates, "rates"},
        {&S_max_workers, "max_workers"},
        {&S_max_ps, "max_ps"},
        {&S_type, "type"},
        {&S_worker_cpu, "worker_cpu"},
        {&S_worker_gpu, "worker_gpu"},
        {&S_ps_cpu, "ps_cpu"},
        {&S_ps_gpu, "ps_gpu"},
        {&S_real_num_epochs, "real_num_epochs"},
        {&S_num_epochs, "num_epochs"},
        {&S_workers, "workers"},
        {&S__active, "_active"},
        {&S__active_ids, "_active_ids"},
        {&S_slot_s, "slot_s"},
        {&S_scaling_overhead_s, "scaling_overhead_s"},
        {&S_cluster, "cluster"},
        {&S_free_cpu, "free_cpu"},
        {&S_free_gpu, "free_gpu"},
        {&S_cpu_capacity, "cpu_capacity"},
        {&S_gpu_capacity, "gpu_capacity"},
        {&S_total_cpu, "total_cpu"},
        {&S_total_gpu, "total_gpu"},
        {&S__cpu_util, "_cpu_util"},
        {&S__gpu_util, "_gpu_util"},
        {&S__rewards, "_rewards"},
        {&S__done, "_done"},
        {&S__rate, "_rate"},
        {&S_t, "t"},
        {&S_allocation, "allocation"},
        {&S_epochs, "epochs"},
        {&S_finished, "finished"},
        {&S_used_cpu, "used_cpu"},
        {&S_used_gpu, "used_gpu"},
        {&S_reward, "reward"},
        {&S_arrival, "arrival"},
        {&S_type_index, "type_index"},
        {&S_progress_epochs, "progress_epochs"},
        {&S_job_id, "job_id"},
        {&S_speed, "speed"},
        {&S_J, "J"},
        {&S__num_jobs, "_num_jobs"},
        {&S__window, "_window"},
        {&S__views, "_views"},
        {&S__t, "_t"},
        {&S_sim, "sim"},
        {&S_last_utilisation, "last_utilisation"},
        {&S__finished, "_finished"},
        {&S__memo, "_memo"},
        {&S_model, "model"},
        {&S_speed_factor, "speed_factor"},
        {&S_iterations_per_epoch, "iterations_per_epoch"},
        {&S_max_w, "max_w"},
        {&S_max_p, "max_p"},
        {&S_iw, "iw"},
        {&S_ip, "ip"},
        {&S_ib, "ib"},
        {&S_open_mask, "open_mask"},
        {&S_open_valid, "open_valid"},
    };
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if ((*names[k].var = PyUnicode_InternFromString(names[k].name)) == NULL) return NULL;
    EMPTY = PyTuple_New(0);
    IDLE = Py_BuildValue("(ii)", 0, 0);
    if (EMPTY == NULL || IDLE == NULL) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    if (PyModule_AddStringConstant(m, "SOURCE_SHA256", DLSCHED_SOURCE_SHA256) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
