/*
 * dlsched's native event loop: the engine of envs/sim/engine.py (Simulator) for the
 * configurations envs/sim/native.py accepts -- continuous time, all-reduce jobs, job order
 * SRSF or FIFO, placement RAND / FF / LS / LWF-k, communication SRSF(n) / AdaDUAL / fair
 * share, FULL or FAST fidelity -- computing the same floating-point operations in the same
 * order, so its per-job times are the Python engine's, bit for bit (tests cross-check every
 * stack).  The Python engine is the specification; read it first.  Differences that change
 * no result: no compute windows (every forward/backward is an event: cheap here), the
 * waiting list is walked instead of indexed, LWF's refusal sorts are applied at once.
 *
 * Compile with -ffp-contract=off: a fused multiply-add would round differently from Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { FW_READY = 0, BW_READY = 1, RUNNING = 2, DONE = 3 };
enum { EV_TASK = 0, EV_COMM = 1, EV_SYNC = 2, EV_ARRIVAL = 3 };
enum { PL_RAND = 0, PL_FF = 1, PL_LWF = 2 };
enum { OR_SRSF = 0, OR_FIFO = 1 };
enum { CM_SRSFN = 0, CM_ADADUAL = 1, CM_FS = 2 };

/* ------------------------------------------------------------------ growable arrays */
typedef struct {
    int *a;
    int n, cap;
} ivec;

static int oom = 0; /* set on allocation failure; checked by the main loop */

static void iv_reserve(ivec *v, int need) {
    if (need <= v->cap) return;
    int c = v->cap ? v->cap : 8;
    while (c < need) c *= 2;
    int *p = (int *)realloc(v->a, (size_t)c * sizeof(int));
    if (!p) {
        oom = 1;
        return;
    }
    v->a = p;
    v->cap = c;
}
static void iv_push(ivec *v, int x) {
    iv_reserve(v, v->n + 1);
    if (oom) return;
    v->a[v->n++] = x;
}
static void iv_insert(ivec *v, int i, int x) {
    iv_reserve(v, v->n + 1);
    if (oom) return;
    memmove(v->a + i + 1, v->a + i, (size_t)(v->n - i) * sizeof(int));
    v->a[i] = x;
    v->n++;
}
static void iv_del(ivec *v, int i) {
    memmove(v->a + i, v->a + i + 1, (size_t)(v->n - i - 1) * sizeof(int));
    v->n--;
}
static void iv_remove(ivec *v, int x) { /* first occurrence, order kept (list.remove) */
    for (int i = 0; i < v->n; i++)
        if (v->a[i] == x) {
            iv_del(v, i);
            return;
        }
}

/* an insertion-ordered set of small ints (flag array + list) */
typedef struct {
    ivec list;
    char *in;
} oset;
static void os_add(oset *s, int x) {
    if (!s->in[x]) {
        s->in[x] = 1;
        iv_push(&s->list, x);
    }
}
static void os_clear(oset *s) {
    for (int i = 0; i < s->list.n; i++) s->in[s->list.a[i]] = 0;
    s->list.n = 0;
}

/* ------------------------------------------------------------------ event heap */
typedef struct {
    double t;
    long long seq;
    long long ver;
    int kind;
    int obj;
} Ev;

typedef struct {
    Ev *a;
    long long n, cap;
} Heap;

static int ev_less(const Ev *x, const Ev *y) {
    return x->t < y->t || (x->t == y->t && x->seq < y->seq);
}
static void hp_push(Heap *h, Ev e) {
    if (h->n == h->cap) {
        long long c = h->cap ? h->cap * 2 : 1024;
        Ev *p = (Ev *)realloc(h->a, (size_t)c * sizeof(Ev));
        if (!p) {
            oom = 1;
            return;
        }
        h->a = p;
        h->cap = c;
    }
    long long i = h->n++;
    while (i > 0) {
        long long p = (i - 1) / 2;
        if (!ev_less(&e, &h->a[p])) break;
        h->a[i] = h->a[p];
        i = p;
    }
    h->a[i] = e;
}
static Ev hp_pop(Heap *h) {
    Ev top = h->a[0];
    Ev last = h->a[--h->n];
    long long i = 0, n = h->n;
    for (;;) {
        long long c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && ev_less(&h->a[c + 1], &h->a[c])) c++;
        if (!ev_less(&h->a[c], &last)) break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (n > 0) h->a[i] = last;
    return top;
}

/* ------------------------------------------------------------------ state */
typedef struct {
    /* spec */
    double submit, fw1, bw1, compute_ms, total_compute, size_mb, mem;
    long long iters;
    int ngpu;
    /* run state */
    double fw, bw, remaining, prio, comm_est_once, start, finish, wk_prio;
    long long chunk, done;
    int placed_order, multi, pending, fresh;
    int *gpus, *servers;
    int nserv;
    signed char *wstate;
    /* its all-reduce (one at a time; the version never resets, so stale ends stay stale) */
    int comm_on;
    double trans, speed, bank_t, start_t, csize;
    long long cver;
    char touched;
} Job;

typedef struct {
    double key;
    long long rank;
    int job;
} QEnt;

typedef struct {
    double mem;
    int ngpu, effect;
    QEnt *e;
    int n, cap;
} QClass;

typedef struct {
    double key;
    long long rank;
    int cls, idx;
} Head;

typedef struct {
    /* cluster and policies */
    int G, S, per, N;
    double gpu_mem, a, b, eta, comm_est;
    int placer, kappa, order, comm, srsf_n, inclusive, reask_on_start;
    long long chunk_max;
    PyObject *draw; /* RAND: a callable returning the generator's next double */
    int draw_failed;
    /* state */
    Job *jobs;
    double *free_mem, *load;
    ivec *gpu_ready; /* pairs (job, worker) */
    int *task_job, *task_w, *task_kind; /* gpu_task; task_job = -1: idle */
    ivec *nic;                          /* running all-reduces (job ids) per server */
    int *waiting_on;
    ivec waiting; /* sorted by (wk_prio, placed_order) */
    ivec unreleased, ready;
    oset dirty_gpus, changed_servers, nic_dirty;
    ivec touched;
    int *dflag;
    int depoch;
    QClass *cls;
    int ncls;
    long long entries, mem_version, refused_at;
    int qn, qfresh, effect_jobs;
    int *server_order;
    double *means;
    int placed_count, finished;
    Heap heap;
    long long seq, events;
    double max_wall_s; /* 0: no wall-clock budget */
    double progress_s; /* 0: no heartbeat; else a stderr line every progress_s wall seconds */
    char label[160];   /* the run's name, for the heartbeat */
    /* scratch */
    int *scratch_a, *scratch_b;
    Head *heads;
    ivec tasks;
    int *tmark;
    int tepoch;
} Sim;

static void push(Sim *s, double t, int kind, int obj, long long ver) {
    Ev e;
    e.t = t;
    e.seq = ++s->seq;
    e.kind = kind;
    e.obj = obj;
    e.ver = ver;
    hp_push(&s->heap, e);
}

static double prio_of(Sim *s, Job *j) { return s->order == OR_SRSF ? j->remaining : j->submit; }

static void set_chunk(Sim *s, Job *j) {
    long long c = j->iters - j->done;
    if (s->chunk_max < c) c = s->chunk_max;
    j->chunk = c;
    j->fw = j->fw1 * (double)c;
    j->bw = j->bw1 * (double)c;
}

/* ------------------------------------------------------------------ placement */
typedef struct {
    double k;
    int pos, v;
} KeyItem;

static int cmp_key(const void *x, const void *y) {
    const KeyItem *p = (const KeyItem *)x, *q = (const KeyItem *)y;
    if (p->k < q->k) return -1;
    if (q->k < p->k) return 1;
    return p->pos - q->pos; /* stable */
}

/* stable sort of v[0..n) by key[v[i]] (Python's list.sort(key=...)) */
static void stable_sort_by(int *v, int n, const double *key, KeyItem *buf) {
    for (int i = 0; i < n; i++) {
        buf[i].k = key[v[i]];
        buf[i].pos = i;
        buf[i].v = v[i];
    }
    qsort(buf, (size_t)n, sizeof(KeyItem), cmp_key);
    for (int i = 0; i < n; i++) v[i] = buf[i].v;
}

static int count_eligible(Sim *s, double need) {
    int c = 0;
    for (int g = 0; g < s->G; g++)
        if (s->free_mem[g] >= need) c++;
    return c;
}

static KeyItem *keybuf = NULL;

static void lwf_refuse(Sim *s) {
    /* sort the persistent server order (stably) by mean GPU workload now */
    for (int v = 0; v < s->S; v++) {
        double sum = 0.0;
        for (int g = v * s->per; g < (v + 1) * s->per; g++) sum += s->load[g];
        s->means[v] = sum / (double)s->per;
    }
    stable_sort_by(s->server_order, s->S, s->means, keybuf);
}

/* GPUs for job j in out[0..ngpu), or 0 if refused; -1 on a failed draw */
static int place(Sim *s, Job *j, int *out) {
    int n = j->ngpu, m = 0;
    double need = j->mem;
    int *avail = s->scratch_a;
    if (s->placer == PL_LWF && n > s->kappa) {
        lwf_refuse(s); /* sorts the server order even when it refuses, as the reference */
        if (count_eligible(s, need) < n) return 0;
        int got = 0;
        for (int k = 0; k < s->S && got < n; k++) {
            int v = s->server_order[k], c = 0;
            int *gs = s->scratch_b;
            for (int g = v * s->per; g < (v + 1) * s->per; g++)
                if (s->free_mem[g] >= need) gs[c++] = g;
            stable_sort_by(gs, c, s->load, keybuf);
            for (int i = 0; i < c; i++) avail[got++] = gs[i];
        }
        for (int i = 0; i < n; i++) out[i] = avail[i];
        return 1;
    }
    for (int g = 0; g < s->G; g++)
        if (s->free_mem[g] >= need) avail[m++] = g;
    if (m < n) return 0;
    if (s->placer == PL_LWF) {
        stable_sort_by(avail, m, s->load, keybuf);
    } else if (s->placer == PL_RAND) {
        for (int i = m - 1; i > 0; i--) {
            PyObject *r = PyObject_CallNoArgs(s->draw);
            if (!r) return -1;
            double u = PyFloat_AsDouble(r);
            Py_DECREF(r);
            if (u == -1.0 && PyErr_Occurred()) return -1;
            int k = (int)(u * (double)(i + 1));
            int tmp = avail[i];
            avail[i] = avail[k];
            avail[k] = tmp;
        }
    }
    for (int i = 0; i < n; i++) out[i] = avail[i];
    return 1;
}

static void make_ready(Sim *s, int job, int w, int g) {
    iv_push(&s->gpu_ready[g], job);
    iv_push(&s->gpu_ready[g], w);
}

static void do_place(Sim *s, int ji, const int *gpus, double t) {
    Job *j = &s->jobs[ji];
    int n = j->ngpu;
    j->nserv = 0;
    for (int i = 0; i < n; i++) {
        int v = gpus[i] / s->per, seen = 0;
        for (int k = 0; k < j->nserv; k++)
            if (j->servers[k] == v) seen = 1;
        if (!seen) j->servers[j->nserv++] = v;
        j->gpus[i] = gpus[i];
    }
    j->multi = j->nserv > 1;
    double est = j->multi ? j->size_mb * s->comm_est : 0.0;
    j->comm_est_once = est;
    double left = (double)(j->iters - j->done);
    double ld = j->compute_ms * left + est * left;
    for (int w = 0; w < n; w++) {
        int g = gpus[w];
        s->free_mem[g] -= j->mem;
        s->load[g] += ld;
        make_ready(s, ji, w, g);
    }
    s->mem_version++;
    for (int w = 0; w < n; w++) j->wstate[w] = FW_READY;
    j->pending = n;
    if (s->chunk_max > 1) set_chunk(s, j);
    j->placed_order = s->placed_count++;
    if (isnan(j->start)) j->start = t;
    for (int w = 0; w < n; w++) os_add(&s->dirty_gpus, gpus[w]);
}

/* placement queue: one sorted list per (memory, GPU count) class */
static void enqueue(Sim *s, int ji) {
    Job *j = &s->jobs[ji];
    j->prio = prio_of(s, j);
    int c = -1;
    for (int k = 0; k < s->ncls; k++)
        if (s->cls[k].mem == j->mem && s->cls[k].ngpu == j->ngpu) c = k;
    if (c < 0) {
        c = s->ncls++;
        QClass *q = &s->cls[c];
        q->mem = j->mem;
        q->ngpu = j->ngpu;
        q->effect = s->placer == PL_LWF && j->ngpu > s->kappa;
        q->e = NULL;
        q->n = q->cap = 0;
    }
    QClass *q = &s->cls[c];
    if (q->n == q->cap) {
        int cap = q->cap ? 2 * q->cap : 8;
        QEnt *p = (QEnt *)realloc(q->e, (size_t)cap * sizeof(QEnt));
        if (!p) {
            oom = 1;
            return;
        }
        q->e = p;
        q->cap = cap;
    }
    QEnt e = {j->prio, s->entries++, ji};
    int i = q->n; /* bisect_right: the new rank is the largest, so after equal keys */
    while (i > 0 && q->e[i - 1].key > e.key) i--;
    memmove(q->e + i + 1, q->e + i, (size_t)(q->n - i) * sizeof(QEnt));
    q->e[i] = e;
    q->n++;
    s->qn++;
    s->qfresh++;
    if (q->effect) s->effect_jobs++;
}

static int qkey_gt(double k, long long r, double pk, long long pr) {
    return k > pk || (k == pk && r > pr);
}

static int cmp_head(const void *x, const void *y) {
    const Head *p = (const Head *)x, *q = (const Head *)y;
    if (p->key < q->key) return -1;
    if (q->key < p->key) return 1;
    return p->rank < q->rank ? -1 : (p->rank > q->rank);
}

static int allocate(Sim *s, double t) {
    if (s->qfresh == 0 && s->refused_at == s->mem_version) {
        if (s->effect_jobs) lwf_refuse(s);
        return 0;
    }
    s->qfresh = 0;
    double pk = -INFINITY;
    long long pr = -1;
    int *gpus = s->scratch_b + s->G; /* scratch_b holds 2G ints */
    for (;;) {
        int nh = 0;
        for (int c = 0; c < s->ncls; c++) {
            QClass *q = &s->cls[c];
            int i = 0;
            while (i < q->n && !qkey_gt(q->e[i].key, q->e[i].rank, pk, pr)) i++;
            if (i < q->n) {
                s->heads[nh].key = q->e[i].key;
                s->heads[nh].rank = q->e[i].rank;
                s->heads[nh].cls = c;
                s->heads[nh].idx = i;
                nh++;
            }
        }
        qsort(s->heads, (size_t)nh, sizeof(Head), cmp_head);
        int best = -1, refused_effect = 0;
        for (int h = 0; h < nh; h++) {
            QClass *q = &s->cls[s->heads[h].cls];
            if (count_eligible(s, q->mem) >= q->ngpu) {
                best = h;
                break;
            }
            refused_effect = refused_effect || q->effect;
        }
        if (refused_effect) lwf_refuse(s);
        if (best < 0) break;
        Head hd = s->heads[best];
        QClass *q = &s->cls[hd.cls];
        int ji = q->e[hd.idx].job;
        int r = place(s, &s->jobs[ji], gpus);
        if (r < 0) return -1;
        if (r == 0) {
            PyErr_Format(PyExc_RuntimeError, "native placer refused job index %d that fits", ji);
            return -1;
        }
        memmove(q->e + hd.idx, q->e + hd.idx + 1, (size_t)(q->n - hd.idx - 1) * sizeof(QEnt));
        q->n--;
        s->qn--;
        if (q->effect) s->effect_jobs--;
        do_place(s, ji, gpus, t);
        pk = hd.key;
        pr = hd.rank;
    }
    s->refused_at = s->mem_version;
    return 0;
}

/* ------------------------------------------------------------------ iterations */
static void finish_job(Sim *s, int ji, double t) {
    s->jobs[ji].finish = t;
    s->finished++;
    iv_push(&s->unreleased, ji);
}

static void begin_iteration(Sim *s, int ji) {
    Job *j = &s->jobs[ji];
    if (j->chunk > 1) set_chunk(s, j);
    int n = j->ngpu;
    for (int w = 0; w < n; w++) j->wstate[w] = FW_READY;
    j->pending = n;
    for (int w = 0; w < n; w++) make_ready(s, ji, w, j->gpus[w]);
    for (int w = 0; w < n; w++) os_add(&s->dirty_gpus, j->gpus[w]);
}

static void sync_job(Sim *s, int ji, double t) {
    Job *j = &s->jobs[ji];
    j->done += j->chunk;
    if (j->comm_est_once != 0.0) {
        double est = j->comm_est_once * (double)j->chunk;
        for (int w = 0; w < j->ngpu; w++) s->load[j->gpus[w]] -= est;
    }
    if (j->done >= j->iters) {
        finish_job(s, ji, t);
        return;
    }
    begin_iteration(s, ji);
}

static void finish_task(Sim *s, int g) {
    int ji = s->task_job[g], w = s->task_w[g], kind = s->task_kind[g];
    Job *j = &s->jobs[ji];
    s->task_job[g] = -1;
    os_add(&s->dirty_gpus, g);
    double dur = kind == FW_READY ? j->fw : j->bw;
    j->remaining -= dur;
    s->load[g] -= dur;
    j->prio = prio_of(s, j);
    if (kind == FW_READY) {
        j->wstate[w] = BW_READY;
        make_ready(s, ji, w, g);
    } else {
        j->wstate[w] = DONE;
        if (--j->pending == 0) iv_push(&s->ready, ji);
    }
}

static void touch(Sim *s, int ji) {
    if (!s->jobs[ji].touched) {
        s->jobs[ji].touched = 1;
        iv_push(&s->touched, ji);
    }
}

static void finish_comm(Sim *s, int ji, double t) {
    Job *j = &s->jobs[ji];
    j->comm_on = 0;
    for (int k = 0; k < j->nserv; k++) iv_remove(&s->nic[j->servers[k]], ji);
    for (int k = 0; k < j->nserv; k++) os_add(&s->changed_servers, j->servers[k]);
    j->touched = 0; /* discard (its stale entry in the list is skipped) */
    for (int k = 0; k < j->nserv; k++) os_add(&s->nic_dirty, j->servers[k]);
    if (s->a > 0) {
        push(s, t + s->a * (double)j->chunk, EV_SYNC, ji, 0);
    } else {
        sync_job(s, ji, t);
    }
}

static void release(Sim *s) {
    for (int i = 0; i < s->unreleased.n; i++) {
        Job *j = &s->jobs[s->unreleased.a[i]];
        for (int w = 0; w < j->ngpu; w++) s->free_mem[j->gpus[w]] += j->mem;
    }
    if (s->unreleased.n) s->mem_version++;
    s->unreleased.n = 0;
}

/* ------------------------------------------------------------------ communication */
static double remaining_mb(Job *task, Job *asking, double t) {
    double rem = task->csize;
    if (task->start_t != t) rem -= task->trans + (t - task->bank_t) * task->speed;
    if (asking->chunk > 1) rem /= (double)asking->chunk;
    return rem;
}

static int admit(Sim *s, Job *j, double t) {
    if (s->comm == CM_FS) return 1;
    if (s->comm == CM_SRSFN) {
        for (int k = 0; k < j->nserv; k++)
            if (s->nic[j->servers[k]].n > s->srsf_n - 1) return 0;
        return 1;
    }
    int most = 0, first = -1;
    for (int k = 0; k < j->nserv; k++) {
        ivec *tk = &s->nic[j->servers[k]];
        if (tk->n > most) {
            most = tk->n;
            first = tk->a[0];
            if (most >= 2) break;
        }
    }
    if (most == 0) return 1;
    if (most >= 2 || first < 0) return 0;
    double b = s->b, eta = s->eta;
    double m_old = remaining_mb(&s->jobs[first], j, t);
    double m_new = j->size_mb;
    if (s->inclusive) return m_old * b >= 2.0 * (b + eta) * m_new;
    return m_new * 2.0 * (b + eta) < b * m_old;
}

static int try_start(Sim *s, int ji, double t) {
    Job *j = &s->jobs[ji];
    if (!admit(s, j, t)) return 0;
    j->comm_on = 1;
    j->csize = j->size_mb * (double)j->chunk;
    j->trans = 0.0;
    j->speed = 0.0;
    j->bank_t = t;
    j->start_t = t;
    for (int k = 0; k < j->nserv; k++) iv_push(&s->nic[j->servers[k]], ji);
    for (int k = 0; k < j->nserv; k++) os_add(&s->changed_servers, j->servers[k]);
    if (s->reask_on_start) {
        for (int k = 0; k < j->nserv; k++) {
            os_add(&s->nic_dirty, j->servers[k]);
            s->dflag[j->servers[k]] = s->depoch;
        }
    }
    touch(s, ji);
    return 1;
}

static int wait_before(Job *x, Job *y) { /* (wk_prio, placed_order) order */
    return x->wk_prio < y->wk_prio || (x->wk_prio == y->wk_prio && x->placed_order < y->placed_order);
}

static Sim *sort_ctx;
static int cmp_placed_g(const void *x, const void *y) {
    int a = *(const int *)x, b = *(const int *)y;
    return sort_ctx->jobs[a].placed_order - sort_ctx->jobs[b].placed_order;
}

static int communicate(Sim *s, double t) {
    int nready = s->ready.n;
    sort_ctx = s;
    qsort(s->ready.a, (size_t)nready, sizeof(int), cmp_placed_g);
    /* walked in place: the syncs below never add to ready (only task ends do) */
    for (int r = 0; r < nready; r++) {
        int ji = s->ready.a[r];
        Job *j = &s->jobs[ji];
        if (j->multi) {
            j->fresh = 1;
            j->wk_prio = j->prio;
            int i = s->waiting.n;
            while (i > 0 && wait_before(j, &s->jobs[s->waiting.a[i - 1]])) i--;
            iv_insert(&s->waiting, i, ji);
            for (int k = 0; k < j->nserv; k++) s->waiting_on[j->servers[k]]++;
        } else {
            sync_job(s, ji, t);
        }
    }
    s->ready.n = 0;
    if (s->unreleased.n) {
        release(s);
        if (s->qn && allocate(s, t) < 0) return -1;
    }
    if (!s->waiting.n) {
        os_clear(&s->nic_dirty);
        return 0;
    }
    int *admitted = s->scratch_a; /* at most N: scratch_a holds max(G, N) ints */
    for (;;) {
        s->depoch++;
        for (int i = 0; i < s->nic_dirty.list.n; i++) s->dflag[s->nic_dirty.list.a[i]] = s->depoch;
        os_clear(&s->nic_dirty);
        int na = 0;
        for (int i = 0; i < s->waiting.n; i++) {
            int ji = s->waiting.a[i];
            Job *j = &s->jobs[ji];
            int ask = j->fresh;
            for (int k = 0; !ask && k < j->nserv; k++)
                if (s->dflag[j->servers[k]] == s->depoch) ask = 1;
            if (!ask) continue;
            j->fresh = 0;
            if (try_start(s, ji, t)) admitted[na++] = ji;
        }
        for (int a = 0; a < na; a++) {
            int ji = admitted[a];
            Job *j = &s->jobs[ji];
            iv_remove(&s->waiting, ji);
            for (int k = 0; k < j->nserv; k++) s->waiting_on[j->servers[k]]--;
        }
        if (!na || !s->waiting.n) break;
    }
    return 0;
}

static double speed_of(Sim *s, Job *j) {
    int k = 0;
    for (int i = 0; i < j->nserv; i++)
        if (s->nic[j->servers[i]].n > k) k = s->nic[j->servers[i]].n;
    return 1.0 / ((double)k * s->b + (double)(k - 1) * s->eta);
}

static void retime(Sim *s, double t) {
    s->tepoch++;
    s->tasks.n = 0;
    for (int i = 0; i < s->touched.n; i++) {
        int ji = s->touched.a[i];
        if (s->jobs[ji].touched && s->tmark[ji] != s->tepoch) {
            s->tmark[ji] = s->tepoch;
            iv_push(&s->tasks, ji);
        }
        s->jobs[ji].touched = 0;
    }
    s->touched.n = 0;
    for (int i = 0; i < s->changed_servers.list.n; i++) {
        ivec *tk = &s->nic[s->changed_servers.list.a[i]];
        for (int k = 0; k < tk->n; k++) {
            int ji = tk->a[k];
            if (s->tmark[ji] != s->tepoch) {
                s->tmark[ji] = s->tepoch;
                iv_push(&s->tasks, ji);
            }
        }
    }
    os_clear(&s->changed_servers);
    sort_ctx = s;
    qsort(s->tasks.a, (size_t)s->tasks.n, sizeof(int), cmp_placed_g);
    for (int i = 0; i < s->tasks.n; i++) {
        Job *j = &s->jobs[s->tasks.a[i]];
        if (j->start_t != t) j->trans += (t - j->bank_t) * j->speed;
        j->bank_t = t;
        j->speed = speed_of(s, j);
        double rest = j->csize - j->trans;
        if (0.0 > rest) rest = 0.0;
        double end = t + rest / j->speed;
        j->cver++;
        push(s, end, EV_COMM, s->tasks.a[i], j->cver);
    }
}

/* ------------------------------------------------------------------ compute tasks */
static void start_tasks(Sim *s, double t) {
    for (int d = 0; d < s->dirty_gpus.list.n; d++) {
        int g = s->dirty_gpus.list.a[d];
        if (s->task_job[g] >= 0) continue;
        ivec *rd = &s->gpu_ready[g];
        if (!rd->n) continue;
        int k = 0;
        if (rd->n > 2) {
            double bp = INFINITY;
            int bo = 0;
            for (int i = 0; i < rd->n; i += 2) {
                Job *j = &s->jobs[rd->a[i]];
                double p = j->prio;
                if (p < bp || (p == bp && j->placed_order < bo)) {
                    k = i;
                    bp = p;
                    bo = j->placed_order;
                }
            }
        }
        int ji = rd->a[k], w = rd->a[k + 1];
        /* remove the pair (order does not matter: the choice above does not depend on it) */
        rd->a[k] = rd->a[rd->n - 2];
        rd->a[k + 1] = rd->a[rd->n - 1];
        rd->n -= 2;
        Job *j = &s->jobs[ji];
        int kind = j->wstate[w];
        double dur = kind == FW_READY ? j->fw : j->bw;
        j->wstate[w] = RUNNING;
        s->task_job[g] = ji;
        s->task_w[g] = w;
        s->task_kind[g] = kind;
        push(s, t + dur, EV_TASK, g, 0);
    }
    os_clear(&s->dirty_gpus);
}

/* ------------------------------------------------------------------ main loop */
static int waiting_touched(Sim *s) {
    for (int i = 0; i < s->nic_dirty.list.n; i++)
        if (s->waiting_on[s->nic_dirty.list.a[i]]) return 1;
    os_clear(&s->nic_dirty);
    return 0;
}

static int run_loop(Sim *s) {
    ivec task_ends = {0}, comm_ends = {0}, syncs = {0}, arrivals = {0};
    int rc = 0;
    unsigned long steps = 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    double next_report = s->progress_s;
    while (s->heap.n) {
        if (oom) {
            PyErr_NoMemory();
            rc = -1;
            break;
        }
        /* Ctrl-C: run Python's signal handlers every 4096 time steps (a KeyboardInterrupt
           raised there ends the run; the caller sees the exception); the same steps check
           the wall-clock budget */
        if ((++steps & 0xFFFu) == 0) {
            if (PyErr_CheckSignals() < 0) {
                rc = -1;
                break;
            }
            if (s->max_wall_s > 0 || s->progress_s > 0) {
                struct timespec now;
                clock_gettime(CLOCK_MONOTONIC, &now);
                double spent = (double)(now.tv_sec - t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - t0.tv_nsec);
                if (s->progress_s > 0 && spent >= next_report) {
                    /* a heartbeat for long runs: how far the simulation is */
                    char line[300];
                    snprintf(line, sizeof line,
                             "%s: %.0f s, simulated time %.6g ms, %d of %d jobs finished\n",
                             s->label, spent, s->heap.a[0].t, s->finished, s->N);
                    PySys_WriteStderr("%s", line);
                    next_report = spent + s->progress_s;
                }
                if (s->max_wall_s > 0 && spent > s->max_wall_s) {
                    char msg[200]; /* PyErr_Format has no %g */
                    snprintf(msg, sizeof msg,
                             "wall-clock budget of %g s spent at simulated time %.6g ms, "
                             "%d of %d jobs finished",
                             s->max_wall_s, s->heap.a[0].t, s->finished, s->N);
                    PyErr_SetString(PyExc_TimeoutError, msg);
                    rc = -1;
                    break;
                }
            }
        }
        double t = s->heap.a[0].t;
        task_ends.n = comm_ends.n = syncs.n = arrivals.n = 0;
        while (s->heap.n && s->heap.a[0].t == t) {
            Ev e = hp_pop(&s->heap);
            s->events++;
            switch (e.kind) {
            case EV_TASK:
                iv_push(&task_ends, e.obj);
                break;
            case EV_COMM:
                if (s->jobs[e.obj].cver == e.ver && s->jobs[e.obj].comm_on)
                    iv_push(&comm_ends, e.obj);
                break;
            case EV_SYNC:
                iv_push(&syncs, e.obj);
                break;
            default:
                iv_push(&arrivals, e.obj);
            }
        }
        /* 1. completions */
        for (int i = 0; i < task_ends.n; i++) finish_task(s, task_ends.a[i]);
        for (int i = 0; i < comm_ends.n; i++) finish_comm(s, comm_ends.a[i], t);
        for (int i = 0; i < syncs.n; i++) sync_job(s, syncs.a[i], t);
        /* 2. release */
        if (s->unreleased.n) release(s);
        /* 3. arrivals, 4. placement */
        for (int i = 0; i < arrivals.n; i++) enqueue(s, arrivals.a[i]);
        if (s->qn && allocate(s, t) < 0) {
            rc = -1;
            break;
        }
        /* 5. communication */
        if (s->ready.n || (s->nic_dirty.list.n && waiting_touched(s))) {
            if (communicate(s, t) < 0) {
                rc = -1;
                break;
            }
        }
        /* 6. rates */
        if (s->changed_servers.list.n || s->touched.n) retime(s, t);
        /* 7. compute tasks */
        if (s->dirty_gpus.list.n) start_tasks(s, t);
    }
    if (!rc && oom) {
        PyErr_NoMemory();
        rc = -1;
    }
    free(task_ends.a);
    free(comm_ends.a);
    free(syncs.a);
    free(arrivals.a);
    return rc;
}

static void sim_free(Sim *s) {
    if (s->jobs)
        for (int i = 0; i < s->N; i++) {
            free(s->jobs[i].gpus);
            free(s->jobs[i].servers);
            free(s->jobs[i].wstate);
        }
    free(s->jobs);
    free(s->free_mem);
    free(s->load);
    if (s->gpu_ready)
        for (int g = 0; g < s->G; g++) free(s->gpu_ready[g].a);
    free(s->gpu_ready);
    free(s->task_job);
    free(s->task_w);
    free(s->task_kind);
    if (s->nic)
        for (int v = 0; v < s->S; v++) free(s->nic[v].a);
    free(s->nic);
    free(s->waiting_on);
    free(s->waiting.a);
    free(s->unreleased.a);
    free(s->ready.a);
    free(s->dirty_gpus.list.a);
    free(s->dirty_gpus.in);
    free(s->changed_servers.list.a);
    free(s->changed_servers.in);
    free(s->nic_dirty.list.a);
    free(s->nic_dirty.in);
    free(s->touched.a);
    free(s->dflag);
    if (s->cls)
        for (int c = 0; c < s->ncls; c++) free(s->cls[c].e);
    free(s->cls);
    free(s->server_order);
    free(s->means);
    free(s->heap.a);
    free(s->scratch_a);
    free(s->scratch_b);
    free(s->heads);
    free(s->tasks.a);
    free(s->tmark);
    free(keybuf);
    keybuf = NULL;
}

PyDoc_STRVAR(run_doc,
             "run(cluster, policies, chunk_max, draw, jobs) -> (start, finish, servers, events)\n\n"
             "cluster = (servers, gpus_per_server, gpu_memory_mb, a_ms, b_ms_per_mb, eta_ms_per_mb)\n"
             "policies = (order, placer, kappa, comm, srsf_n, inclusive, comm_est_ms_per_mb)\n"
             "jobs = sequence of (submit_ms, forward_ms, backward_ms, compute_ms, total_compute_ms,\n"
             "        model_size_mb, gpu_memory_mb, iterations, num_gpus)\n"
             "Called by envs.sim.native, which validates everything first.");

static PyObject *py_run(PyObject *self, PyObject *args) {
    PyObject *jobs_obj, *draw;
    int S, per, order, placer, kappa, comm, srsf_n, inclusive;
    double gmem, a, b, eta, comm_est;
    long long chunk_max;
    double max_wall_s = 0.0, progress_s = 0.0;
    const char *label = "run";
    if (!PyArg_ParseTuple(args, "(iidddd)(iiiiiid)LOO|dds", &S, &per, &gmem, &a, &b, &eta,
                          &order, &placer, &kappa, &comm, &srsf_n, &inclusive, &comm_est,
                          &chunk_max, &draw, &jobs_obj, &max_wall_s, &progress_s, &label))
        return NULL;
    PyObject *seq = PySequence_Fast(jobs_obj, "jobs must be a sequence");
    if (!seq) return NULL;
    Sim sim;
    memset(&sim, 0, sizeof sim);
    Sim *s = &sim;
    oom = 0;
    s->S = S;
    s->per = per;
    s->G = S * per;
    s->N = (int)PySequence_Fast_GET_SIZE(seq);
    s->gpu_mem = gmem;
    s->a = a;
    s->b = b;
    s->eta = eta;
    s->comm_est = comm_est;
    s->max_wall_s = max_wall_s;
    s->progress_s = progress_s;
    snprintf(s->label, sizeof s->label, "%s", label);
    s->order = order;
    s->placer = placer;
    s->kappa = kappa;
    s->comm = comm;
    s->srsf_n = srsf_n;
    s->inclusive = inclusive;
    s->reask_on_start = comm == CM_ADADUAL;
    s->chunk_max = chunk_max;
    s->draw = draw;
    s->refused_at = -1;
    int G = s->G, N = s->N, big = G > N ? G : N;
    s->jobs = (Job *)calloc((size_t)(N ? N : 1), sizeof(Job));
    s->free_mem = (double *)malloc((size_t)G * sizeof(double));
    s->load = (double *)calloc((size_t)G, sizeof(double));
    s->gpu_ready = (ivec *)calloc((size_t)G, sizeof(ivec));
    s->task_job = (int *)malloc((size_t)G * sizeof(int));
    s->task_w = (int *)calloc((size_t)G, sizeof(int));
    s->task_kind = (int *)calloc((size_t)G, sizeof(int));
    s->nic = (ivec *)calloc((size_t)S, sizeof(ivec));
    s->waiting_on = (int *)calloc((size_t)S, sizeof(int));
    s->dirty_gpus.in = (char *)calloc((size_t)G, 1);
    s->changed_servers.in = (char *)calloc((size_t)S, 1);
    s->nic_dirty.in = (char *)calloc((size_t)S, 1);
    s->dflag = (int *)calloc((size_t)S, sizeof(int));
    s->cls = (QClass *)calloc((size_t)(N ? N : 1), sizeof(QClass));
    s->server_order = (int *)malloc((size_t)S * sizeof(int));
    s->means = (double *)malloc((size_t)S * sizeof(double));
    s->scratch_a = (int *)malloc((size_t)big * sizeof(int));
    s->scratch_b = (int *)malloc((size_t)2 * G * sizeof(int));
    s->heads = (Head *)malloc((size_t)(N ? N : 1) * sizeof(Head));
    s->tmark = (int *)calloc((size_t)(N ? N : 1), sizeof(int));
    keybuf = (KeyItem *)malloc((size_t)big * sizeof(KeyItem));
    if (!s->jobs || !s->free_mem || !s->load || !s->gpu_ready || !s->task_job || !s->task_w ||
        !s->task_kind || !s->nic || !s->waiting_on || !s->dirty_gpus.in ||
        !s->changed_servers.in || !s->nic_dirty.in || !s->dflag || !s->cls ||
        !s->server_order || !s->means || !s->scratch_a || !s->scratch_b || !s->heads ||
        !s->tmark || !keybuf) {
        Py_DECREF(seq);
        sim_free(s);
        return PyErr_NoMemory();
    }
    for (int g = 0; g < G; g++) {
        s->free_mem[g] = gmem;
        s->task_job[g] = -1;
    }
    for (int v = 0; v < S; v++) s->server_order[v] = v;
    for (int i = 0; i < N; i++) {
        Job *j = &s->jobs[i];
        PyObject *row = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyArg_ParseTuple(row, "dddddddLi", &j->submit, &j->fw1, &j->bw1, &j->compute_ms,
                              &j->total_compute, &j->size_mb, &j->mem, &j->iters, &j->ngpu)) {
            Py_DECREF(seq);
            sim_free(s);
            return NULL;
        }
        if (j->ngpu < 1 || j->ngpu > G || j->iters < 1) {
            Py_DECREF(seq);
            sim_free(s);
            PyErr_Format(PyExc_ValueError, "job index %d: bad num_gpus or iterations", i);
            return NULL;
        }
        j->fw = j->fw1;
        j->bw = j->bw1;
        j->chunk = 1;
        j->remaining = j->total_compute;
        j->placed_order = -1;
        j->start = NAN;
        j->finish = NAN;
        j->gpus = (int *)malloc((size_t)j->ngpu * sizeof(int));
        j->servers = (int *)malloc((size_t)j->ngpu * sizeof(int));
        j->wstate = (signed char *)calloc((size_t)j->ngpu, 1);
        if (!j->gpus || !j->servers || !j->wstate) {
            Py_DECREF(seq);
            sim_free(s);
            return PyErr_NoMemory();
        }
        push(s, j->submit, EV_ARRIVAL, i, 0);
    }
    Py_DECREF(seq);
    int rc = run_loop(s);
    if (rc < 0) {
        sim_free(s);
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "native engine failed");
        return NULL;
    }
    PyObject *start = PyList_New(N), *finish = PyList_New(N), *servers = PyList_New(N);
    if (!start || !finish || !servers) {
        Py_XDECREF(start);
        Py_XDECREF(finish);
        Py_XDECREF(servers);
        sim_free(s);
        return NULL;
    }
    for (int i = 0; i < N; i++) {
        PyList_SET_ITEM(start, i, PyFloat_FromDouble(s->jobs[i].start));
        PyList_SET_ITEM(finish, i, PyFloat_FromDouble(s->jobs[i].finish));
        PyList_SET_ITEM(servers, i, PyLong_FromLong(s->jobs[i].nserv));
    }
    long long events = s->events;
    sim_free(s);
    return Py_BuildValue("(NNNL)", start, finish, servers, events);
}

static PyMethodDef methods[] = {{"run", py_run, METH_VARARGS, run_doc}, {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_native",
                                       "dlsched's native event loop (see envs/sim/native.py).",
                                       -1, methods};

#ifndef DLSCHED_SOURCE_SHA256
#define DLSCHED_SOURCE_SHA256 "unknown"
#endif

PyMODINIT_FUNC PyInit__native(void) {
    PyObject *m = PyModule_Create(&moduledef);
    if (m && PyModule_AddStringConstant(m, "SOURCE_SHA256", DLSCHED_SOURCE_SHA256) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
