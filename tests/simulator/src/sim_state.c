/* File-backed driver state of the simulated node, shared by every process through flock. */
#define _GNU_SOURCE
#include "sim.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static FILE *open_at(int dirfd, const char *name)
{
    int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "r");
    if (!f)
        close(fd);
    return f;
}

static void parse_starts(sim_profile *p, const char *list)
{
    const char *s = list;
    p->nplacements = 0;
    while (*s && p->nplacements < SIM_MAX_PLACEMENTS) {
        char *end;
        unsigned long v = strtoul(s, &end, 10);
        if (end == s)
            break;
        p->starts[p->nplacements++] = (unsigned)v;
        s = (*end == ',') ? end + 1 : end;
    }
}

static int load_node(sim_ctx *ctx)
{
    FILE *f = open_at(ctx->simfd, "node.conf");
    if (!f)
        return SIM_ERROR_DRIVER_NOT_LOADED;
    sim_node *n = &ctx->node;
    memset(n, 0, sizeof(*n));
    char line[1024];
    while (fgets(line, sizeof(line), f)) {
        char key[64];
        if (sscanf(line, "%63s", key) != 1 || key[0] == '#')
            continue;
        if (!strcmp(key, "model")) {
            sscanf(line, "%*s %63s", n->model);
        } else if (!strcmp(key, "slices")) {
            sscanf(line, "%*s %u", &n->slices);
        } else if (!strcmp(key, "cu_count")) {
            sscanf(line, "%*s %u", &n->cu_count);
        } else if (!strcmp(key, "memory_mib")) {
            sscanf(line, "%*s %llu", &n->memory_mib);
        } else if (!strcmp(key, "virtualization")) {
            sscanf(line, "%*s %u", &n->virtualization);
        } else if (!strcmp(key, "gi_id_base")) {
            sscanf(line, "%*s %u", &n->gi_id_base);
        } else if (!strcmp(key, "card") && n->ncards < SIM_MAX_CARDS) {
            sim_card *c = &n->cards[n->ncards];
            if (sscanf(line, "%*s %u %31s %u %u", &c->index, c->pci, &c->drm_card,
                       &c->render_minor) == 4)
                n->ncards++;
        } else if (!strcmp(key, "profile") && n->nprofiles < SIM_MAX_PROFILES) {
            sim_profile *p = &n->profiles[n->nprofiles];
            char starts[512];
            if (sscanf(line, "%*s %u %u %u %llu %u %63s %511s", &p->id, &p->slices, &p->cu_count,
                       &p->memory_mib, &p->gi_count_max, p->name, starts) == 7) {
                parse_starts(p, starts);
                n->nprofiles++;
            }
        }
    }
    fclose(f);
    if (n->ncards == 0 || n->slices == 0)
        return SIM_ERROR_DRIVER_NOT_LOADED;
    return SIM_SUCCESS;
}

static void load_mode(sim_ctx *ctx)
{
    ctx->mode = 0;
    FILE *f = open_at(ctx->simfd, "mode");
    if (!f)
        return;
    if (fscanf(f, "%u", &ctx->mode) != 1)
        ctx->mode = 0;
    fclose(f);
}

static void load_instances(sim_ctx *ctx)
{
    sim_instances *in = &ctx->inst;
    memset(in, 0, sizeof(*in));
    in->next_serial = 1;
    FILE *f = open_at(ctx->simfd, "instances");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof(line), f)) {
        char key[16];
        if (sscanf(line, "%15s", key) != 1)
            continue;
        if (!strcmp(key, "serial")) {
            sscanf(line, "%*s %llu", &in->next_serial);
        } else if (!strcmp(key, "gi") && in->ngis < SIM_MAX_GIS) {
            sim_gi *g = &in->gis[in->ngis];
            if (sscanf(line, "%*s %u %u %u %u %u %llu", &g->card, &g->id, &g->profile_id,
                       &g->start, &g->size, &g->serial) == 6)
                in->ngis++;
        } else if (!strcmp(key, "ci") && in->ncis < SIM_MAX_GIS) {
            sim_ci *c = &in->cis[in->ncis];
            if (sscanf(line, "%*s %u %u %u %u %llu %36s", &c->card, &c->gi_id, &c->id,
                       &c->profile_id, &c->serial, c->uuid) == 6)
                in->ncis++;
        }
    }
    fclose(f);
}

/* `vdev <id> <card> <cus> <mem_mib> <pipe> <mask low> <mask high>` per live vdev. */
static void load_vdevs(sim_ctx *ctx)
{
    ctx->nvdevs = 0;
    FILE *f = open_at(ctx->simfd, "vdevs");
    if (!f)
        return;
    char line[256];
    while (fgets(line, sizeof(line), f) && ctx->nvdevs < SIM_MAX_VDEVS) {
        sim_vdev *v = &ctx->vdevs[ctx->nvdevs];
        if (sscanf(line, "vdev %u %u %u %llu %u %llx %llx", &v->id, &v->card, &v->cu_count,
                   &v->mem_mib, &v->pipe_id, &v->cu_mask[0], &v->cu_mask[1]) == 7)
            ctx->nvdevs++;
    }
    fclose(f);
}

static void load_faults(sim_ctx *ctx)
{
    sim_faults *fl = &ctx->faults;
    memset(fl, 0, sizeof(*fl));
    fl->unreachable_code = SIM_ERROR_UNKNOWN;
    FILE *f = open_at(ctx->simfd, "faults");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof(line), f)) {
        char key[32];
        if (sscanf(line, "%31s", key) != 1)
            continue;
        if (!strcmp(key, "driver")) {
            sscanf(line, "%*s %d", &fl->driver_code);
        } else if (!strcmp(key, "unreachable")) {
            unsigned card;
            int code = SIM_ERROR_UNKNOWN;
            if (sscanf(line, "%*s %u %d", &card, &code) >= 1 && card < 32) {
                fl->unreachable |= 1u << card;
                fl->unreachable_code = code;
            }
        } else if (!strcmp(key, "fail") && fl->nfail < SIM_MAX_FAULTS) {
            sim_fail *x = &fl->fail[fl->nfail];
            if (sscanf(line, "%*s %31s %u %d", x->op, &x->count, &x->code) == 3)
                fl->nfail++;
        }
    }
    fclose(f);
}

/* Atomic replace inside ROOT/.sim so a reader never sees half a file. */
static int write_at(int dirfd, const char *name, const char *content)
{
    char tmp[128];
    snprintf(tmp, sizeof(tmp), ".%s.%d.tmp", name, (int)getpid());
    int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    size_t len = strlen(content), off = 0;
    while (off < len) {
        ssize_t w = write(fd, content + off, len - off);
        if (w <= 0) {
            close(fd);
            unlinkat(dirfd, tmp, 0);
            return -1;
        }
        off += (size_t)w;
    }
    close(fd);
    return renameat(dirfd, tmp, dirfd, name);
}

int sim_open(sim_ctx *ctx, int exclusive, int kernel_fd)
{
    memset(ctx, 0, sizeof(*ctx));
    ctx->simfd = -1;
    ctx->lockfd = -1;
    if (kernel_fd >= 0) {
        ctx->simfd = fcntl(kernel_fd, F_DUPFD_CLOEXEC, 0);
    } else {
        const char *root = getenv("HYDMI_SIM_ROOT");
        /* Long roots would truncate registry paths: refuse them outright. */
        if (!root || !*root || strlen(root) > PATH_MAX - 256)
            return SIM_ERROR_DRIVER_NOT_LOADED;
        /* Canonical, so holder paths from /proc readlinks compare equal. */
        char real[PATH_MAX];
        snprintf(ctx->root, sizeof(ctx->root), "%s", realpath(root, real) ? real : root);
        size_t l = strlen(ctx->root);
        while (l > 1 && ctx->root[l - 1] == '/')
            ctx->root[--l] = '\0';
        char simdir[PATH_MAX + 8];
        snprintf(simdir, sizeof(simdir), "%s/.sim", ctx->root);
        ctx->simfd = open(simdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    }
    if (ctx->simfd < 0)
        return SIM_ERROR_DRIVER_NOT_LOADED;
    ctx->lockfd = openat(ctx->simfd, "lock", O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (ctx->lockfd < 0)
        ctx->lockfd = openat(ctx->simfd, "lock", O_RDONLY | O_CLOEXEC);
    if (ctx->lockfd < 0 || flock(ctx->lockfd, exclusive ? LOCK_EX : LOCK_SH) != 0) {
        sim_close(ctx);
        return SIM_ERROR_DRIVER_NOT_LOADED;
    }
    int rc = load_node(ctx);
    if (rc != SIM_SUCCESS) {
        sim_close(ctx);
        return rc;
    }
    load_mode(ctx);
    load_instances(ctx);
    load_vdevs(ctx);
    load_faults(ctx);
    if (ctx->faults.driver_code != 0) {
        rc = ctx->faults.driver_code;
        sim_close(ctx);
        return rc;
    }
    return SIM_SUCCESS;
}

static int commit_into(sim_ctx *ctx, char *buf, size_t buf_len);

int sim_commit(sim_ctx *ctx)
{
    enum { BUF_LEN = SIM_MAX_GIS * 2 * 128 + 256 };
    char *buf = malloc(BUF_LEN);
    if (!buf)
        return SIM_ERROR_MEMORY;
    int rc = commit_into(ctx, buf, BUF_LEN);
    free(buf);
    return rc;
}

static int commit_into(sim_ctx *ctx, char *buf, size_t buf_len)
{
    size_t off = 0;
    sim_instances *in = &ctx->inst;
    off += (size_t)snprintf(buf + off, buf_len - off, "serial %llu\n", in->next_serial);
    for (unsigned i = 0; i < in->ngis; i++) {
        sim_gi *g = &in->gis[i];
        off += (size_t)snprintf(buf + off, buf_len - off, "gi %u %u %u %u %u %llu\n", g->card,
                                g->id, g->profile_id, g->start, g->size, g->serial);
    }
    for (unsigned i = 0; i < in->ncis; i++) {
        sim_ci *c = &in->cis[i];
        off += (size_t)snprintf(buf + off, buf_len - off, "ci %u %u %u %u %llu %s\n", c->card,
                                c->gi_id, c->id, c->profile_id, c->serial, c->uuid);
    }
    if (write_at(ctx->simfd, "instances", buf) != 0)
        return SIM_ERROR_UNKNOWN;
    off = 0;
    buf[0] = '\0';
    for (unsigned i = 0; i < ctx->nvdevs; i++) {
        const sim_vdev *v = &ctx->vdevs[i];
        off += (size_t)snprintf(buf + off, buf_len - off,
                                "vdev %u %u %u %llu %u %016llx %016llx\n", v->id, v->card,
                                v->cu_count, v->mem_mib, v->pipe_id, v->cu_mask[0],
                                v->cu_mask[1]);
    }
    if (write_at(ctx->simfd, "vdevs", buf) != 0)
        return SIM_ERROR_UNKNOWN;
    char mode[16];
    snprintf(mode, sizeof(mode), "%u\n", ctx->mode);
    if (write_at(ctx->simfd, "mode", mode) != 0)
        return SIM_ERROR_UNKNOWN;
    if (ctx->faults_dirty) {
        sim_faults *fl = &ctx->faults;
        off = 0;
        buf[0] = '\0';
        if (fl->driver_code)
            off += (size_t)snprintf(buf + off, buf_len - off, "driver %d\n", fl->driver_code);
        for (unsigned c = 0; c < 32; c++)
            if (fl->unreachable & (1u << c))
                off += (size_t)snprintf(buf + off, buf_len - off, "unreachable %u %d\n", c,
                                        fl->unreachable_code);
        for (unsigned i = 0; i < fl->nfail; i++)
            if (fl->fail[i].count > 0)
                off += (size_t)snprintf(buf + off, buf_len - off, "fail %s %u %d\n",
                                        fl->fail[i].op, fl->fail[i].count, fl->fail[i].code);
        if (write_at(ctx->simfd, "faults", buf) != 0)
            return SIM_ERROR_UNKNOWN;
        ctx->faults_dirty = 0;
    }
    return SIM_SUCCESS;
}

void sim_close(sim_ctx *ctx)
{
    if (ctx->lockfd >= 0)
        close(ctx->lockfd); /* releases the flock */
    if (ctx->simfd >= 0)
        close(ctx->simfd);
    ctx->lockfd = -1;
    ctx->simfd = -1;
}

int sim_take_fault(sim_ctx *ctx, const char *op)
{
    for (unsigned i = 0; i < ctx->faults.nfail; i++) {
        sim_fail *x = &ctx->faults.fail[i];
        if (x->count > 0 && !strcmp(x->op, op)) {
            x->count--;
            ctx->faults_dirty = 1;
            return x->code;
        }
    }
    return SIM_SUCCESS;
}

const sim_profile *sim_profile_by_id(const sim_node *node, unsigned id)
{
    for (unsigned i = 0; i < node->nprofiles; i++)
        if (node->profiles[i].id == id)
            return &node->profiles[i];
    return NULL;
}

const sim_profile *sim_profile_by_width(const sim_node *node, unsigned slices)
{
    for (unsigned i = 0; i < node->nprofiles; i++)
        if (node->profiles[i].slices == slices)
            return &node->profiles[i];
    return NULL;
}

sim_gi *sim_find_gi(sim_ctx *ctx, unsigned card, unsigned id)
{
    for (unsigned i = 0; i < ctx->inst.ngis; i++)
        if (ctx->inst.gis[i].card == card && ctx->inst.gis[i].id == id)
            return &ctx->inst.gis[i];
    return NULL;
}

sim_ci *sim_find_ci(sim_ctx *ctx, unsigned card, unsigned gi_id, unsigned id)
{
    for (unsigned i = 0; i < ctx->inst.ncis; i++) {
        sim_ci *c = &ctx->inst.cis[i];
        if (c->card == card && c->gi_id == gi_id && c->id == id)
            return c;
    }
    return NULL;
}

void sim_registry_dir(const sim_ctx *ctx, char *out, size_t len)
{
    snprintf(out, len, "%s/etc/dmi_mig_config", ctx->root);
}

void sim_ci_conf_name(unsigned card, unsigned gi, unsigned ci, char *out, size_t len)
{
    snprintf(out, len, "dev%ugi%uci%u.conf", card, gi, ci);
}

void sim_gi_conf_name(unsigned card, unsigned gi, char *out, size_t len)
{
    snprintf(out, len, "dev%ugi%u.conf", card, gi);
}

/* `key: value` with values aligned one column after the longest key (memory_size_MB). */
#define KV(buf, off, len, key, fmt, ...)                                                        \
    (off) += (size_t)snprintf((buf) + (off), (len) - (off), "%-16s" fmt "\n", key ":",         \
                              __VA_ARGS__)

static size_t render_gi_block(const sim_ctx *ctx, const sim_gi *gi, char *out, size_t len)
{
    const sim_profile *p = sim_profile_by_id(&ctx->node, gi->profile_id);
    size_t off = 0;
    KV(out, off, len, "pci", "%s", ctx->node.cards[gi->card].pci);
    KV(out, off, len, "id", "%u", gi->id);
    KV(out, off, len, "profile_id", "%u", gi->profile_id);
    KV(out, off, len, "cu_count", "%u", p ? p->cu_count : 0);
    KV(out, off, len, "memory_size_MB", "%llu", p ? p->memory_mib : 0ULL);
    return off;
}

int sim_render_gi_conf(const sim_ctx *ctx, const sim_gi *gi, char *out, size_t len)
{
    render_gi_block(ctx, gi, out, len);
    return 0;
}

int sim_render_ci_conf(const sim_ctx *ctx, const sim_gi *gi, const sim_ci *ci, char *out,
                       size_t len)
{
    const sim_profile *p = sim_profile_by_id(&ctx->node, gi->profile_id);
    size_t off = render_gi_block(ctx, gi, out, len);
    KV(out, off, len, "pci", "%s", ctx->node.cards[gi->card].pci);
    KV(out, off, len, "gi_id", "%u", ci->gi_id);
    KV(out, off, len, "id", "%u", ci->id);
    KV(out, off, len, "profile_id", "%u", ci->profile_id);
    KV(out, off, len, "cu_count", "%u", p ? p->cu_count : 0);
    KV(out, off, len, "mig_uuid", "%s", ci->uuid);
    return 0;
}

int sim_write_file(const char *path, const char *content)
{
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "we");
    if (!f)
        return -1;
    int ok = fputs(content, f) >= 0;
    if (fclose(f) != 0 || !ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

int sim_mkdir_p(const char *path)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

/* The driver (re)creates its registry as a side effect of library calls while the mode is on. */
int sim_registry_ensure(const sim_ctx *ctx)
{
    char dir[PATH_MAX], path[PATH_MAX + 64];
    sim_registry_dir(ctx, dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/gi", dir);
    if (sim_mkdir_p(path) != 0)
        return -1;
    snprintf(path, sizeof(path), "%s/ci", dir);
    if (sim_mkdir_p(path) != 0)
        return -1;
    for (unsigned i = 0; i < ctx->node.ncards; i++) {
        char line[64];
        snprintf(path, sizeof(path), "%s/dev%u", dir, ctx->node.cards[i].index);
        snprintf(line, sizeof(line), "%s\n", ctx->node.cards[i].pci);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
            continue;
        if (sim_write_file(path, line) != 0)
            return -1;
    }
    return 0;
}

int sim_remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode))
        return unlink(path);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char sub[PATH_MAX];
        snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
        sim_remove_tree(sub);
    }
    closedir(d);
    return rmdir(path);
}

int sim_registry_remove(const sim_ctx *ctx)
{
    char dir[PATH_MAX];
    sim_registry_dir(ctx, dir, sizeof(dir));
    return sim_remove_tree(dir);
}

void sim_vdev_dir(const sim_ctx *ctx, char *out, size_t len)
{
    snprintf(out, len, "%s/etc/vdev", ctx->root);
}

int sim_vdev_conf_path(const sim_ctx *ctx, unsigned id, char *out, size_t len)
{
    int n = snprintf(out, len, "%s/etc/vdev/vdev%u.conf", ctx->root, id);
    return (n < 0 || (size_t)n >= len) ? -1 : 0;
}

/* The driver's conf file of one vdev: nine `key: value` lines in a fixed order
 * (docs/dev/hardware.md, "Logical slices"). */
int sim_render_vdev_conf(const sim_ctx *ctx, const sim_vdev *v, char *out, size_t len)
{
    const char *pci = v->card < ctx->node.ncards ? ctx->node.cards[v->card].pci : "";
    int n = snprintf(out, len,
                     "PciBusId: %s\n"
                     "cu_mask: 0x%016llx\n"
                     "cu_mask: 0x%016llx\n"
                     "cu_count: %u\n"
                     "mem: %llu MiB\n"
                     "device_id: %u\n"
                     "vdev_id: %u\n"
                     "pipe_id: %u\n"
                     "enable: 1\n",
                     pci, v->cu_mask[0], v->cu_mask[1], v->cu_count, v->mem_mib, v->card, v->id,
                     v->pipe_id);
    return (n < 0 || (size_t)n >= len) ? -1 : 0;
}

sim_vdev *sim_find_vdev(sim_ctx *ctx, unsigned id)
{
    for (unsigned i = 0; i < ctx->nvdevs; i++)
        if (ctx->vdevs[i].id == id)
            return &ctx->vdevs[i];
    return NULL;
}

void sim_ops_log(const sim_ctx *ctx, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line) - 1, fmt, ap);
    va_end(ap);
    strcat(line, "\n");
    int fd = openat(ctx->simfd, "ops.log", O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    ssize_t w = write(fd, line, strlen(line));
    (void)w;
    close(fd);
}

void sim_new_uuid(char out[SIM_UUID_LEN + 1])
{
    unsigned char b[16];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    ssize_t got = fd >= 0 ? read(fd, b, sizeof(b)) : -1;
    if (fd >= 0)
        close(fd);
    if (got != (ssize_t)sizeof(b)) {
        /* No urandom (unlikely): still unique per create within this node. */
        unsigned long long x = (unsigned long long)getpid() * 6364136223846793005ULL;
        for (unsigned i = 0; i < sizeof(b); i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL + (unsigned long long)rand();
            b[i] = (unsigned char)(x >> 56);
        }
    }
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    snprintf(out, SIM_UUID_LEN + 1,
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
             b[15]);
}
