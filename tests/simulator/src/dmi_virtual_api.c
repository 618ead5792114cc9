/* libhydmi.so: the simulated vendor virtual-device ("vdev", logical slice) library.
 * Exports exactly the calls of dmi_types.h, everything else is hidden. Like libhydmi_mig.so.1 it
 * re-reads HYDMI_SIM_ROOT and the driver state under ROOT/.sim/ (flock'd) on every call, so many
 * processes and hy-smi share one node. Facts and assumptions: docs/dev/hardware.md, "Logical
 * slices (virtual devices, `libhydmi.so`)". */
#define _GNU_SOURCE
#include "dmi_types.h"
#include "sim.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* The layout is a fact (docs/dev/hardware.md); on LP64 it is 296 bytes. */
#if defined(__LP64__)
_Static_assert(sizeof(dmiDeviceInfo) == 296, "dmiDeviceInfo size");
_Static_assert(offsetof(dmiDeviceInfo, compute_unit_count) == 256, "compute_unit_count");
_Static_assert(offsetof(dmiDeviceInfo, global_mem_size) == 264, "global_mem_size");
_Static_assert(offsetof(dmiDeviceInfo, usage_mem_size) == 272, "usage_mem_size");
_Static_assert(offsetof(dmiDeviceInfo, container_id) == 280, "container_id");
_Static_assert(offsetof(dmiDeviceInfo, device_id) == 288, "device_id");
#endif
_Static_assert(DMI_MAX_VDEVS_PER_CARD == SIM_VDEVS_PER_CARD, "per-card limit");

/* ---------------------------------------------------------------- call plumbing ---------- */
/* Unset root, no node.conf or no openable ROOT/dev/mkfd: OPEN_MKFD_FAILED (the library reaches
 * the driver through mkfd; there is no init call a caller could make, so NOT_INITIALIZED would
 * name a cure that does not exist). A `driver C` fault answers C as it is. */
static dmiStatus dmi_open(sim_ctx **out, int exclusive)
{
    sim_ctx *ctx = malloc(sizeof(sim_ctx));
    if (!ctx)
        return DMI_STATUS_NO_MEMORY;
    int rc = sim_open(ctx, exclusive, -1);
    if (rc != SIM_SUCCESS) {
        int code = ctx->faults.driver_code ? ctx->faults.driver_code : DMI_STATUS_OPEN_MKFD_FAILED;
        free(ctx);
        return (dmiStatus)code;
    }
    char mkfd[PATH_MAX + 16];
    snprintf(mkfd, sizeof(mkfd), "%s/dev/mkfd", ctx->root);
    int fd = open(mkfd, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        sim_close(ctx);
        free(ctx);
        return DMI_STATUS_OPEN_MKFD_FAILED;
    }
    close(fd);
    *out = ctx;
    return DMI_STATUS_SUCCESS;
}

static dmiStatus done(sim_ctx *ctx, dmiStatus rc)
{
    if (ctx->faults_dirty)
        sim_commit(ctx);
    sim_close(ctx);
    free(ctx);
    return rc;
}

#define OPEN_OR_RETURN(ctx, excl)                                                              \
    sim_ctx *ctx = NULL;                                                                       \
    do {                                                                                       \
        dmiStatus rc_open_ = dmi_open(&ctx, excl);                                             \
        if (rc_open_ != DMI_STATUS_SUCCESS)                                                    \
            return rc_open_;                                                                   \
    } while (0)

static int card_ok(const sim_ctx *ctx, int device_id)
{
    return device_id >= 0 && (unsigned)device_id < ctx->node.ncards;
}

static unsigned card_cus(const sim_ctx *ctx)
{
    return ctx->node.cu_count > SIM_MAX_CUS ? SIM_MAX_CUS : ctx->node.cu_count;
}

/* What the live vdevs of one card take (optionally leaving one vdev out). */
typedef struct {
    unsigned count;
    unsigned long long cus;
    unsigned long long mem_mib;
    unsigned long long mask[2];
    unsigned pipes; /* bit i: pipe i taken */
} card_use;

static void card_usage(const sim_ctx *ctx, unsigned card, int skip_id, card_use *u)
{
    memset(u, 0, sizeof(*u));
    for (unsigned i = 0; i < ctx->nvdevs; i++) {
        const sim_vdev *v = &ctx->vdevs[i];
        if (v->card != card || (int)v->id == skip_id)
            continue;
        u->count++;
        u->cus += v->cu_count;
        u->mem_mib += v->mem_mib;
        u->mask[0] |= v->cu_mask[0];
        u->mask[1] |= v->cu_mask[1];
        if (v->pipe_id < SIM_VDEV_PIPES)
            u->pipes |= 1u << v->pipe_id;
    }
}

static int bit_of(const unsigned long long m[2], unsigned b)
{
    return (int)((m[b / 64] >> (b % 64)) & 1ULL);
}

static void set_bit(unsigned long long m[2], unsigned b)
{
    m[b / 64] |= 1ULL << (b % 64);
}

/* The lowest `n` CUs of the card that `u` leaves free go into `out` (and are marked taken). */
static int take_cus(const sim_ctx *ctx, card_use *u, unsigned n, unsigned long long out[2])
{
    for (unsigned b = 0; b < card_cus(ctx) && n > 0; b++) {
        if (bit_of(u->mask, b))
            continue;
        set_bit(out, b);
        set_bit(u->mask, b);
        n--;
    }
    return n == 0 ? 0 : -1;
}

static int take_pipe(card_use *u)
{
    for (unsigned p = 0; p < SIM_VDEV_PIPES; p++) {
        if (!(u->pipes & (1u << p))) {
            u->pipes |= 1u << p;
            return (int)p;
        }
    }
    return -1;
}

static int ensure_vdev_dir(const sim_ctx *ctx)
{
    char dir[PATH_MAX];
    struct stat st;
    sim_vdev_dir(ctx, dir, sizeof(dir));
    if (stat(dir, &st) == 0)
        return S_ISDIR(st.st_mode) ? 0 : -1;
    if (sim_mkdir_p(dir) != 0)
        return -1;
    return chmod(dir, 0755);
}

/* Written in place (not replaced), as a driver rewrites its file: a bind mount of the conf keeps
 * seeing the current text. Mode 0644 whatever the umask. */
static int write_conf(const char *path, const char *body)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    int ok = fchmod(fd, 0644) == 0;
    size_t len = strlen(body), off = 0;
    while (ok && off < len) {
        ssize_t w = write(fd, body + off, len - off);
        if (w <= 0)
            ok = 0;
        else
            off += (size_t)w;
    }
    return (close(fd) == 0 && ok) ? 0 : -1;
}

static int conf_of(const sim_ctx *ctx, const sim_vdev *v, char *path, size_t len)
{
    return sim_vdev_conf_path(ctx, v->id, path, len);
}

static void unlink_conf(const sim_ctx *ctx, unsigned id)
{
    char path[PATH_MAX + 64];
    struct stat st;
    if (sim_vdev_conf_path(ctx, id, path, sizeof(path)) == 0 && lstat(path, &st) == 0 &&
        !S_ISDIR(st.st_mode))
        unlink(path);
}

static int held(const sim_ctx *ctx, const sim_vdev *v)
{
    char path[PATH_MAX + 64];
    return conf_of(ctx, v, path, sizeof(path)) == 0 && sim_path_held(path);
}

static void remove_vdev(sim_ctx *ctx, unsigned id)
{
    for (unsigned i = 0; i < ctx->nvdevs; i++) {
        if (ctx->vdevs[i].id == id) {
            ctx->vdevs[i] = ctx->vdevs[--ctx->nvdevs];
            return;
        }
    }
}

static void fill_card_info(const sim_ctx *ctx, dmiDeviceInfo *info)
{
    memset(info, 0, sizeof(*info));
    /* Assumption: the name is the simulated model's name (the real string is not known). */
    snprintf(info->name, sizeof(info->name), "%s", ctx->node.model);
}

/* ---------------------------------------------------------------- queries ---------------- */
EXPORT dmiStatus dmiGetDeviceCount(int *count)
{
    if (!count)
        return DMI_STATUS_INVALID_ARGUMENTS;
    OPEN_OR_RETURN(ctx, 0);
    *count = (int)ctx->node.ncards;
    return done(ctx, DMI_STATUS_SUCCESS);
}

EXPORT dmiStatus dmiGetDeviceInfo(int device_id, dmiDeviceInfo *info)
{
    if (!info)
        return DMI_STATUS_INVALID_ARGUMENTS;
    OPEN_OR_RETURN(ctx, 0);
    if (!card_ok(ctx, device_id))
        return done(ctx, DMI_STATUS_INVALID_ARGUMENTS);
    fill_card_info(ctx, info);
    info->compute_unit_count = (int)ctx->node.cu_count;
    info->global_mem_size = (size_t)(ctx->node.memory_mib << 20);
    info->device_id = device_id;
    return done(ctx, DMI_STATUS_SUCCESS);
}

EXPORT dmiStatus dmiGetMaxVDeviceCount(int *count)
{
    if (!count)
        return DMI_STATUS_INVALID_ARGUMENTS;
    OPEN_OR_RETURN(ctx, 0);
    *count = SIM_VDEVS_PER_CARD; /* per card */
    return done(ctx, DMI_STATUS_SUCCESS);
}

EXPORT dmiStatus dmiGetVDeviceCount(int *count)
{
    if (!count)
        return DMI_STATUS_INVALID_ARGUMENTS;
    OPEN_OR_RETURN(ctx, 0);
    *count = (int)ctx->nvdevs; /* the whole node */
    return done(ctx, DMI_STATUS_SUCCESS);
}

EXPORT dmiStatus dmiGetDeviceRemainingInfo(int device_id, size_t *cus, size_t *mem_bytes)
{
    if (!cus || !mem_bytes)
        return DMI_STATUS_INVALID_ARGUMENTS;
    OPEN_OR_RETURN(ctx, 0);
    if (!card_ok(ctx, device_id))
        return done(ctx, DMI_STATUS_INVALID_ARGUMENTS);
    card_use u;
    card_usage(ctx, (unsigned)device_id, -1, &u);
    *cus = (size_t)(card_cus(ctx) - u.cus);
    *mem_bytes = (size_t)((ctx->node.memory_mib - u.mem_mib) << 20);
    return done(ctx, DMI_STATUS_SUCCESS);
}

EXPORT dmiStatus dmiGetVDeviceInfo(int vdev_id, dmiDeviceInfo *info)
{
    if (!info || vdev_id < 0)
        return DMI_STATUS_INVALID_ARGUMENTS;
    OPEN_OR_RETURN(ctx, 0);
    const sim_vdev *v = sim_find_vdev(ctx, (unsigned)vdev_id);
    if (!v)
        return done(ctx, DMI_STATUS_VDEV_NOT_EXIST);
    fill_card_info(ctx, info);
    info->compute_unit_count = (int)v->cu_count;
    info->global_mem_size = (size_t)(v->mem_mib << 20);
    info->device_id = (int)v->card;
    return done(ctx, DMI_STATUS_SUCCESS);
}

/* ---------------------------------------------------------------- create ----------------- */
EXPORT dmiStatus dmiCreateVDevices(int device_id, int count, int *cus, int *mem_mib)
{
    if (count < 1 || !cus || !mem_mib)
        return DMI_STATUS_INVALID_ARGUMENTS;
    if (count > SIM_VDEVS_PER_CARD)
        return DMI_STATUS_OUT_OF_RESOURCES; /* can never fit; the arrays are not read */
    for (int i = 0; i < count; i++)
        if (cus[i] < 1 || mem_mib[i] < 1)
            return DMI_STATUS_INVALID_ARGUMENTS;
    OPEN_OR_RETURN(ctx, 1);
    if (!card_ok(ctx, device_id))
        return done(ctx, DMI_STATUS_INVALID_ARGUMENTS);
    /* No slices on a driver without virtualization, nor while partitions are (to be) on.
     * The simulator's pending mode always equals the current one. */
    if (!ctx->node.virtualization || ctx->mode != 0)
        return done(ctx, DMI_STATUS_NOT_SUPPORTED);
    unsigned card = (unsigned)device_id;
    card_use u;
    card_usage(ctx, card, -1, &u);
    unsigned long long want_cus = 0, want_mem = 0;
    for (int i = 0; i < count; i++) {
        want_cus += (unsigned long long)cus[i];
        want_mem += (unsigned long long)mem_mib[i];
    }
    if (u.count + (unsigned)count > SIM_VDEVS_PER_CARD || want_cus > card_cus(ctx) - u.cus ||
        want_mem > ctx->node.memory_mib - u.mem_mib)
        return done(ctx, DMI_STATUS_OUT_OF_RESOURCES);
    int rc = sim_take_fault(ctx, "vdev_create");
    if (rc != SIM_SUCCESS)
        return done(ctx, (dmiStatus)rc);

    /* Plan: lowest free node-global ids, lowest free CUs and pipes of the card, in order. */
    sim_vdev fresh[SIM_VDEVS_PER_CARD];
    unsigned id = 0, max_id = ctx->node.ncards * SIM_VDEVS_PER_CARD;
    for (int i = 0; i < count; i++) {
        while (id < max_id && sim_find_vdev(ctx, id))
            id++;
        sim_vdev *v = &fresh[i];
        memset(v, 0, sizeof(*v));
        v->id = id++;
        v->card = card;
        v->cu_count = (unsigned)cus[i];
        v->mem_mib = (unsigned long long)mem_mib[i];
        int pipe = take_pipe(&u);
        if (v->id >= max_id || pipe < 0 || take_cus(ctx, &u, v->cu_count, v->cu_mask) != 0)
            return done(ctx, DMI_STATUS_OUT_OF_RESOURCES); /* unreachable given the checks */
        v->pipe_id = (unsigned)pipe;
    }
    if (ensure_vdev_dir(ctx) != 0)
        return done(ctx, DMI_STATUS_FILE_ERROR);
    for (int i = 0; i < count; i++) {
        char path[PATH_MAX + 64], body[512];
        if (conf_of(ctx, &fresh[i], path, sizeof(path)) != 0 ||
            sim_render_vdev_conf(ctx, &fresh[i], body, sizeof(body)) != 0 ||
            write_conf(path, body) != 0) {
            for (int k = 0; k <= i; k++)
                unlink_conf(ctx, fresh[k].id);
            return done(ctx, DMI_STATUS_FILE_ERROR);
        }
    }
    /* Fault "crash half-way": the conf files are on disk, the driver never records the vdevs. */
    rc = sim_take_fault(ctx, "vdev_create_crash");
    if (rc != SIM_SUCCESS)
        return done(ctx, (dmiStatus)rc);
    for (int i = 0; i < count; i++)
        ctx->vdevs[ctx->nvdevs++] = fresh[i];
    if (sim_commit(ctx) != SIM_SUCCESS) {
        for (int i = 0; i < count; i++)
            unlink_conf(ctx, fresh[i].id);
        return done(ctx, DMI_STATUS_ERROR);
    }
    for (int i = 0; i < count; i++)
        sim_ops_log(ctx, "create_vdev card=%u vdev=%u cus=%u mem_mib=%llu", card, fresh[i].id,
                    fresh[i].cu_count, fresh[i].mem_mib);
    return done(ctx, DMI_STATUS_SUCCESS);
}

/* ---------------------------------------------------------------- destroy / update ------- */
EXPORT dmiStatus dmiDestroySingleVDevice(int vdev_id)
{
    if (vdev_id < 0)
        return DMI_STATUS_INVALID_ARGUMENTS;
    OPEN_OR_RETURN(ctx, 1);
    sim_vdev *v = sim_find_vdev(ctx, (unsigned)vdev_id);
    if (!v)
        return done(ctx, DMI_STATUS_VDEV_NOT_EXIST);
    if (held(ctx, v))
        return done(ctx, DMI_STATUS_DEVICE_BUSY);
    int rc = sim_take_fault(ctx, "vdev_destroy");
    if (rc != SIM_SUCCESS)
        return done(ctx, (dmiStatus)rc);
    unsigned card = v->card, id = v->id;
    remove_vdev(ctx, id);
    unlink_conf(ctx, id);
    if (sim_commit(ctx) != SIM_SUCCESS)
        return done(ctx, DMI_STATUS_ERROR);
    sim_ops_log(ctx, "destroy_vdev card=%u vdev=%u", card, id);
    return done(ctx, DMI_STATUS_SUCCESS);
}

static int by_id(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return x < y ? -1 : (x > y);
}

/* Every vdev of one card, or none of them: one busy vdev refuses the whole call. A card without
 * vdevs is SUCCESS with nothing done (assumption). */
EXPORT dmiStatus dmiDestroyVDevices(int device_id)
{
    OPEN_OR_RETURN(ctx, 1);
    if (!card_ok(ctx, device_id))
        return done(ctx, DMI_STATUS_INVALID_ARGUMENTS);
    unsigned ids[SIM_MAX_VDEVS], n = 0;
    for (unsigned i = 0; i < ctx->nvdevs; i++) {
        if (ctx->vdevs[i].card != (unsigned)device_id)
            continue;
        if (held(ctx, &ctx->vdevs[i]))
            return done(ctx, DMI_STATUS_DEVICE_BUSY);
        ids[n++] = ctx->vdevs[i].id;
    }
    int rc = sim_take_fault(ctx, "vdev_destroy");
    if (rc != SIM_SUCCESS)
        return done(ctx, (dmiStatus)rc);
    qsort(ids, n, sizeof(ids[0]), by_id);
    for (unsigned i = 0; i < n; i++) {
        remove_vdev(ctx, ids[i]);
        unlink_conf(ctx, ids[i]);
    }
    if (sim_commit(ctx) != SIM_SUCCESS)
        return done(ctx, DMI_STATUS_ERROR);
    for (unsigned i = 0; i < n; i++)
        sim_ops_log(ctx, "destroy_vdev card=%d vdev=%u", device_id, ids[i]);
    return done(ctx, DMI_STATUS_SUCCESS);
}

/* -1 keeps a value. Shrinking keeps the vdev's lowest CUs, growing adds the card's lowest free
 * ones (assumption); the pipe stays. The conf file is rewritten in place. */
EXPORT dmiStatus dmiUpdateSingleVDevice(int vdev_id, int cus, int mem_mib)
{
    if (vdev_id < 0 || cus == 0 || cus < -1 || mem_mib == 0 || mem_mib < -1)
        return DMI_STATUS_INVALID_ARGUMENTS;
    OPEN_OR_RETURN(ctx, 1);
    sim_vdev *v = sim_find_vdev(ctx, (unsigned)vdev_id);
    if (!v)
        return done(ctx, DMI_STATUS_VDEV_NOT_EXIST);
    if (held(ctx, v))
        return done(ctx, DMI_STATUS_DEVICE_BUSY);
    unsigned new_cus = cus == -1 ? v->cu_count : (unsigned)cus;
    unsigned long long new_mem = mem_mib == -1 ? v->mem_mib : (unsigned long long)mem_mib;
    card_use u;
    card_usage(ctx, v->card, (int)v->id, &u);
    if (new_cus > card_cus(ctx) - u.cus || new_mem > ctx->node.memory_mib - u.mem_mib)
        return done(ctx, DMI_STATUS_OUT_OF_RESOURCES);
    int rc = sim_take_fault(ctx, "vdev_update");
    if (rc != SIM_SUCCESS)
        return done(ctx, (dmiStatus)rc);
    if (new_cus == v->cu_count && new_mem == v->mem_mib)
        return done(ctx, DMI_STATUS_SUCCESS);
    sim_vdev old = *v, next = *v;
    next.cu_count = new_cus;
    next.mem_mib = new_mem;
    next.cu_mask[0] = next.cu_mask[1] = 0;
    unsigned keep = 0;
    for (unsigned b = 0; b < SIM_MAX_CUS && keep < new_cus; b++) {
        if (bit_of(old.cu_mask, b)) {
            set_bit(next.cu_mask, b);
            set_bit(u.mask, b);
            keep++;
        }
    }
    if (keep < new_cus && take_cus(ctx, &u, new_cus - keep, next.cu_mask) != 0)
        return done(ctx, DMI_STATUS_OUT_OF_RESOURCES);
    char path[PATH_MAX + 64], body[512];
    if (conf_of(ctx, &next, path, sizeof(path)) != 0 ||
        sim_render_vdev_conf(ctx, &next, body, sizeof(body)) != 0 || write_conf(path, body) != 0) {
        if (sim_render_vdev_conf(ctx, &old, body, sizeof(body)) == 0)
            write_conf(path, body); /* best effort: put the old text back */
        return done(ctx, DMI_STATUS_FILE_ERROR);
    }
    *v = next;
    if (sim_commit(ctx) != SIM_SUCCESS)
        return done(ctx, DMI_STATUS_ERROR);
    sim_ops_log(ctx, "update_vdev card=%u vdev=%u cus=%u mem_mib=%llu", next.card, next.id,
                next.cu_count, next.mem_mib);
    return done(ctx, DMI_STATUS_SUCCESS);
}

/* ---------------------------------------------------------------- status text ------------ */
/* Our own wording (the simulator's, not the vendor's). Needs no node. */
EXPORT dmiStatus dmiGetStatusString(dmiStatus status, const char **text)
{
    static const char *const texts[] = {
        [DMI_STATUS_SUCCESS] = "Success",
        [DMI_STATUS_ERROR] = "Error",
        [DMI_STATUS_NO_MEMORY] = "Out of host memory",
        [DMI_STATUS_OPEN_MKFD_FAILED] = "Cannot open the mkfd device",
        [DMI_STATUS_MKFD_ALREADY_OPENED] = "The mkfd device is already open",
        [DMI_STATUS_SYS_NODE_NOT_EXIST] = "A sysfs node is missing",
        [DMI_STATUS_NOT_SUPPORTED] = "Not supported",
        [DMI_STATUS_MKFD_NOT_OPENED] = "The mkfd device is not open",
        [DMI_STATUS_CREATE_VDEV_FAILED] = "Virtual device creation failed",
        [DMI_STATUS_DESTROY_VDEV_FAILED] = "Virtual device destruction failed",
        [DMI_STATUS_INVALID_ARGUMENTS] = "Invalid arguments",
        [DMI_STATUS_OUT_OF_RESOURCES] = "Out of resources",
        [DMI_STATUS_QUERY_VDEV_INFO_FAILED] = "Virtual device query failed",
        [DMI_STATUS_ERROR_NOT_INITIALIZED] = "Not initialized",
        [DMI_STATUS_DEVICE_NOT_SUPPORT] = "The device has no virtual-device support",
        [DMI_STATUS_VDEV_NOT_EXIST] = "No such virtual device",
        [DMI_STATUS_INIT_DEVICE_FAILED] = "Device initialization failed",
        [DMI_STATUS_DEVICE_BUSY] = "Device busy",
        [DMI_STATUS_FILE_ERROR] = "File error",
        [DMI_STATUS_PERMISSION] = "Permission denied",
    };
    if (!text || (unsigned)status >= sizeof(texts) / sizeof(texts[0]))
        return DMI_STATUS_INVALID_ARGUMENTS;
    *text = texts[status];
    return DMI_STATUS_SUCCESS;
}
