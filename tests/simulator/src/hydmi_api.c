/* libhydmi_mig.so.1: the simulated vendor management library.
 * Exports NVML symbol names with Hygon struct layouts. Every call re-reads HYDMI_SIM_ROOT and
 * the node state under ROOT/.sim/ with flock, so many processes (and hy-smi) share one node. */
#define _GNU_SOURCE
#include "hydmi_types.h"
#include "sim.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* ---------------------------------------------------------------- opaque handles --------- */
/* Handles live in one mmap'd region placed above 4 GiB, so a binding that squeezes a handle
 * through a 32-bit int crashes or gets INVALID_ARGUMENT instead of silently working. */
enum { H_DEV = 1, H_GI = 2, H_CI = 3, H_MIG = 4 };
#define H_MAGIC 0x48594d49u
#define H_REGION_SIZE (4u << 20)

typedef struct {
    unsigned magic;
    unsigned kind;
    unsigned card;
    unsigned gi_id;
    unsigned ci_id;
    unsigned pad;
    unsigned long long serial;
    unsigned long long root_hash;
} sim_handle;

static pthread_mutex_t h_lock = PTHREAD_MUTEX_INITIALIZER;
static sim_handle *h_slots;
static size_t h_capacity, h_used, h_next;

static unsigned long long root_hash(const char *root)
{
    unsigned long long h = 1469598103934665603ULL;
    for (const unsigned char *p = (const unsigned char *)root; *p; p++)
        h = (h ^ *p) * 1099511628211ULL;
    return h;
}

static int h_region(void)
{
    if (h_slots)
        return 0;
    void *hint = (void *)(uintptr_t)0x6b1e00000000ULL;
    void *p = mmap(hint, H_REGION_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                   0);
    if (p == MAP_FAILED)
        return -1;
    h_slots = p;
    h_capacity = H_REGION_SIZE / sizeof(sim_handle);
    return 0;
}

/* Same object → same handle (NVML hands out stable handles). */
static void *h_get(const sim_ctx *ctx, unsigned kind, unsigned card, unsigned gi_id,
                   unsigned ci_id, unsigned long long serial)
{
    unsigned long long rh = root_hash(ctx->root);
    void *out = NULL;
    pthread_mutex_lock(&h_lock);
    if (h_region() == 0) {
        for (size_t i = 0; i < h_used; i++) {
            sim_handle *h = &h_slots[i];
            if (h->kind == kind && h->card == card && h->gi_id == gi_id && h->ci_id == ci_id &&
                h->serial == serial && h->root_hash == rh) {
                out = h;
                break;
            }
        }
        if (!out) {
            size_t i = h_next;
            h_next = (h_next + 1) % h_capacity; /* a full ring recycles the oldest slot */
            if (h_used < h_capacity)
                h_used++;
            sim_handle *h = &h_slots[i];
            *h = (sim_handle){H_MAGIC, kind, card, gi_id, ci_id, 0, serial, rh};
            out = h;
        }
    }
    pthread_mutex_unlock(&h_lock);
    return out;
}

static const sim_handle *h_check(const sim_ctx *ctx, const void *p, unsigned kind)
{
    if (!p || !h_slots)
        return NULL;
    const char *c = p, *base = (const char *)h_slots;
    if (c < base || c >= base + h_capacity * sizeof(sim_handle) ||
        (size_t)(c - base) % sizeof(sim_handle) != 0)
        return NULL;
    const sim_handle *h = p;
    if (h->magic != H_MAGIC || h->kind != kind || h->root_hash != root_hash(ctx->root))
        return NULL;
    return h;
}

/* ---------------------------------------------------------------- call plumbing ---------- */
#define CALL_OPEN(ctx, excl)                                                                  \
    sim_ctx *ctx = malloc(sizeof(sim_ctx));                                                   \
    if (!ctx)                                                                                 \
        return SIM_ERROR_MEMORY;                                                              \
    do {                                                                                      \
        int rc_open_ = sim_open(ctx, excl, -1);                                               \
        if (rc_open_ != SIM_SUCCESS) {                                                        \
            free(ctx);                                                                        \
            return rc_open_;                                                                  \
        }                                                                                     \
    } while (0)

static int call_done(sim_ctx *ctx, int rc)
{
    if (ctx->faults_dirty)
        sim_commit(ctx);
    sim_close(ctx);
    free(ctx);
    return rc;
}

static int card_error(const sim_ctx *ctx, unsigned card)
{
    if (card >= ctx->node.ncards)
        return SIM_ERROR_INVALID_ARGUMENT;
    if (card < 32 && (ctx->faults.unreachable & (1u << card)))
        return ctx->faults.unreachable_code;
    return SIM_SUCCESS;
}

static int resolve_dev(const sim_ctx *ctx, const void *dev, unsigned *card)
{
    const sim_handle *h = h_check(ctx, dev, H_DEV);
    if (!h)
        return SIM_ERROR_INVALID_ARGUMENT;
    *card = h->card;
    return card_error(ctx, h->card);
}

static int resolve_gi(sim_ctx *ctx, const void *gi, sim_gi **out)
{
    const sim_handle *h = h_check(ctx, gi, H_GI);
    if (!h)
        return SIM_ERROR_INVALID_ARGUMENT;
    int rc = card_error(ctx, h->card);
    if (rc != SIM_SUCCESS)
        return rc;
    sim_gi *g = sim_find_gi(ctx, h->card, h->gi_id);
    if (!g || g->serial != h->serial)
        return SIM_ERROR_NOT_FOUND; /* destroyed, maybe id reused by another instance */
    *out = g;
    return SIM_SUCCESS;
}

static int resolve_ci(sim_ctx *ctx, const void *ci, unsigned kind, sim_ci **out)
{
    const sim_handle *h = h_check(ctx, ci, kind);
    if (!h)
        return SIM_ERROR_INVALID_ARGUMENT;
    int rc = card_error(ctx, h->card);
    if (rc != SIM_SUCCESS)
        return rc;
    sim_ci *c = sim_find_ci(ctx, h->card, h->gi_id, h->ci_id);
    if (!c || c->serial != h->serial)
        return SIM_ERROR_NOT_FOUND;
    *out = c;
    return SIM_SUCCESS;
}

static void *dev_handle(const sim_ctx *ctx, unsigned card)
{
    return h_get(ctx, H_DEV, card, 0, 0, 0);
}

static void *gi_handle(const sim_ctx *ctx, const sim_gi *g)
{
    return h_get(ctx, H_GI, g->card, g->id, 0, g->serial);
}

static void *ci_handle(const sim_ctx *ctx, const sim_ci *c, unsigned kind)
{
    return h_get(ctx, kind, c->card, c->gi_id, c->id, c->serial);
}

static void profile_name(const sim_profile *p, char *out, size_t len)
{
    snprintf(out, len, "MIG %s", p->name);
}

/* Whole-GI compute profile: NVML numbering (slice count - 1). */
static unsigned ci_profile_id_for(unsigned gi_slices)
{
    return gi_slices - 1;
}

static unsigned occupied_mask(const sim_ctx *ctx, unsigned card)
{
    unsigned mask = 0;
    for (unsigned i = 0; i < ctx->inst.ngis; i++) {
        const sim_gi *g = &ctx->inst.gis[i];
        if (g->card == card)
            mask |= ((1u << g->size) - 1u) << g->start;
    }
    return mask;
}

static unsigned span_mask(unsigned start, unsigned size)
{
    return ((1u << size) - 1u) << start;
}

static int registry_path(const sim_ctx *ctx, const char *sub, const char *name, char *out,
                         size_t len)
{
    char dir[PATH_MAX];
    sim_registry_dir(ctx, dir, sizeof(dir));
    int n = snprintf(out, len, "%s/%s/%s", dir, sub, name);
    return (n < 0 || (size_t)n >= len) ? -1 : 0;
}

/* ---------------------------------------------------------------- system ----------------- */
EXPORT nvmlReturn_t nvmlGetSystemMigMode(unsigned int *current, unsigned int *pending)
{
    if (!current || !pending)
        return SIM_ERROR_INVALID_ARGUMENT;
    CALL_OPEN(ctx, 0);
    *current = ctx->mode;
    *pending = ctx->mode;
    return call_done(ctx, SIM_SUCCESS);
}

static int any_gi(const sim_ctx *ctx)
{
    return ctx->inst.ngis > 0;
}

EXPORT nvmlReturn_t nvmlSetSystemMigMode(unsigned int mode, nvmlReturn_t *activationStatus)
{
    if (mode != HYDMI_MIG_DISABLE && mode != HYDMI_MIG_ENABLE)
        return SIM_ERROR_INVALID_ARGUMENT;
    CALL_OPEN(ctx, 1);
    int rc = SIM_SUCCESS;
    char kfd[PATH_MAX + 16];
    snprintf(kfd, sizeof(kfd), "%s/dev/kfd", ctx->root);
    /* Measured: refused while any process holds /dev/kfd (mkfd holders do not count). */
    if (sim_path_held(kfd))
        rc = SIM_ERROR_IN_USE;
    else if (mode == HYDMI_MIG_DISABLE && any_gi(ctx))
        rc = SIM_ERROR_IN_USE;
    /* Assumption (docs/dev/hardware.md, "Logical slices"): no source says whether live virtual
     * devices (libhydmi.so) block the switch; fail closed. */
    else if (mode == HYDMI_MIG_ENABLE && ctx->nvdevs > 0)
        rc = SIM_ERROR_IN_USE;
    else
        rc = sim_take_fault(ctx, "set_mode");
    if (rc == SIM_SUCCESS) {
        ctx->mode = mode;
        if (mode == HYDMI_MIG_ENABLE) {
            if (sim_registry_ensure(ctx) != 0)
                rc = SIM_ERROR_UNKNOWN;
        } else {
            sim_registry_remove(ctx);
        }
        if (rc == SIM_SUCCESS && sim_commit(ctx) != SIM_SUCCESS)
            rc = SIM_ERROR_UNKNOWN;
    }
    if (activationStatus)
        *activationStatus = rc;
    return call_done(ctx, rc);
}

/* ---------------------------------------------------------------- devices ---------------- */
EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count)
{
    if (!count)
        return SIM_ERROR_INVALID_ARGUMENT;
    CALL_OPEN(ctx, 0);
    *count = ctx->node.ncards;
    return call_done(ctx, SIM_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    if (!device)
        return SIM_ERROR_INVALID_ARGUMENT;
    CALL_OPEN(ctx, 0);
    if (index >= ctx->node.ncards)
        return call_done(ctx, SIM_ERROR_INVALID_ARGUMENT);
    void *h = dev_handle(ctx, index);
    if (!h)
        return call_done(ctx, SIM_ERROR_MEMORY);
    *device = h;
    return call_done(ctx, SIM_SUCCESS);
}

/* Only the full domain form (0000:09:00.0) is accepted, as measured. */
static int full_pci_form(const char *s)
{
    static const char shape[] = "hhhh:hh:hh.h";
    if (strlen(s) != sizeof(shape) - 1)
        return 0;
    for (size_t i = 0; shape[i]; i++) {
        if (shape[i] == 'h' ? !isxdigit((unsigned char)s[i]) : s[i] != shape[i])
            return 0;
    }
    return 1;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    if (!pciBusId || !device || !full_pci_form(pciBusId))
        return SIM_ERROR_INVALID_ARGUMENT;
    CALL_OPEN(ctx, 0);
    for (unsigned i = 0; i < ctx->node.ncards; i++) {
        if (strcasecmp(ctx->node.cards[i].pci, pciBusId) != 0)
            continue;
        if (card_error(ctx, i) != SIM_SUCCESS)
            break; /* unreachable card: not found by address */
        void *h = dev_handle(ctx, i);
        if (!h)
            return call_done(ctx, SIM_ERROR_MEMORY);
        *device = h;
        return call_done(ctx, SIM_SUCCESS);
    }
    return call_done(ctx, SIM_ERROR_NOT_FOUND);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    (void)uuid;
    (void)device;
    return SIM_ERROR_NOT_SUPPORTED; /* measured identity gap */
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    if (!index)
        return SIM_ERROR_INVALID_ARGUMENT;
    CALL_OPEN(ctx, 0);
    unsigned card;
    int rc = resolve_dev(ctx, device, &card);
    if (rc == SIM_SUCCESS)
        *index = card;
    return call_done(ctx, rc);
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    (void)device;
    (void)name;
    (void)length;
    return SIM_ERROR_INVALID_ARGUMENT; /* measured identity gap */
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, hydmiPciInfo_t *pci)
{
    if (!pci)
        return SIM_ERROR_INVALID_ARGUMENT;
    CALL_OPEN(ctx, 0);
    unsigned card;
    int rc = resolve_dev(ctx, device, &card);
    if (rc == SIM_SUCCESS)
        memset(pci, 0, sizeof(*pci)); /* measured: SUCCESS with an empty bus id */
    return call_done(ctx, rc);
}

static int mig_attributes(sim_ctx *ctx, const void *device, hydmiDeviceAttributes_t *a)
{
    sim_ci *c;
    int rc = resolve_ci(ctx, device, H_MIG, &c);
    if (rc != SIM_SUCCESS)
        return rc;
    sim_gi *g = sim_find_gi(ctx, c->card, c->gi_id);
    const sim_profile *p = g ? sim_profile_by_id(&ctx->node, g->profile_id) : NULL;
    if (!p)
        return SIM_ERROR_UNKNOWN;
    memset(a, 0, sizeof(*a));
    a->index = c->card;
    a->cu_count = p->cu_count;
    a->memory_size_MB = p->memory_mib;
    a->gpu_instance_slice_count = p->slices;
    a->compute_instance_slice_count = p->slices;
    return SIM_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device, hydmiDeviceAttributes_t *a)
{
    if (!a)
        return SIM_ERROR_INVALID_ARGUMENT;
    CALL_OPEN(ctx, 0);
    if (h_check(ctx, device, H_MIG))
        return call_done(ctx, mig_attributes(ctx, device, a));
    unsigned card;
    int rc = resolve_dev(ctx, device, &card);
    if (rc == SIM_SUCCESS) {
        /* uuid and name stay empty: the library offers no identity (docs/dev/hardware.md). */
        memset(a, 0, sizeof(*a));
        a->index = card;
        a->cu_count = ctx->node.cu_count;
        a->memory_size_MB = ctx->node.memory_mib;
        a->gpu_instance_slice_count = ctx->node.slices;
        a->compute_instance_slice_count = ctx->node.slices;
    }
    return call_done(ctx, rc);
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, hydmiMemory_t *memory)
{
    if (!memory)
        return SIM_ERROR_INVALID_ARGUMENT;
    CALL_OPEN(ctx, 0);
    unsigned card;
    int rc = resolve_dev(ctx, device, &card);
    if (rc == SIM_SUCCESS) {
        memory->total = ctx->node.memory_mib << 20;
        memory->used = 0;
        memory->free = memory->total;
    }
    return call_done(ctx, rc);
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, hydmiUtilization_t *u)
{
    if (!u)
        return SIM_ERROR_INVALID_ARGUMENT;
    CALL_OPEN(ctx, 0);
    unsigned card;
    int rc = resolve_dev(ctx, device, &card);
    if (rc == SIM_SUCCESS) {
        u->gpu = 0;
        u->memory = 0;
    }
    return call_done(ctx, rc);
}

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current,
                                         unsigned int *pending)
{
    if (!current || !pending)
        return SIM_ERROR_INVALID_ARGUMENT;
    CALL_OPEN(ctx, 0);
    unsigned card;
    int rc = resolve_dev(ctx, device, &card);
    if (rc == SIM_SUCCESS) {
        *current = ctx->mode; /* node-wide */
        *pending = ctx->mode;
    }
    return call_done(ctx, rc);
}

/* ---------------------------------------------------------------- GPU instances ---------- */
static void fill_profile_info(const sim_profile *p, hydmiGpuInstanceProfileInfo_t *info)
{
    memset(info, 0, sizeof(*info));
    info->id = p->id;
    info->gi_count_max = p->gi_count_max;
    info->cu_count = p->cu_count;
    info->gpu_slice_count = p->slices;
    info->memory_size_MB = p->memory_mib;
    profile_name(p, info->name, sizeof(info->name));
}

/* profileIndex is a width index (slice count - 1), not a profile id. */
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device,
                                                        unsigned int profileIndex,
                                                        hydmiGpuInstanceProfileInfo_t *info)
{
    if (!info)
        return SIM_ERROR_INVALID_ARGUMENT;
    CALL_OPEN(ctx, 0);
    unsigned card;
    int rc = resolve_dev(ctx, device, &card);
    if (rc != SIM_SUCCESS)
        return call_done(ctx, rc);
    if (!ctx->node.virtualization)
        return call_done(ctx, SIM_ERROR_NOT_SUPPORTED);
    const sim_profile *p = sim_profile_by_width(&ctx->node, profileIndex + 1);
    if (!p)
        return call_done(ctx, SIM_ERROR_INVALID_ARGUMENT);
    fill_profile_info(p, info);
    return call_done(ctx, SIM_SUCCESS);
}

static int dev_profile(sim_ctx *ctx, const void *device, unsigned profile_id, unsigned *card,
                       const sim_profile **p)
{
    int rc = resolve_dev(ctx, device, card);
    if (rc != SIM_SUCCESS)
        return rc;
    if (!ctx->node.virtualization)
        return SIM_ERROR_NOT_SUPPORTED;
    *p = sim_profile_by_id(&ctx->node, profile_id);
    return *p ? SIM_SUCCESS : SIM_ERROR_INVALID_ARGUMENT;
}

/* Every legal placement on an empty card: occupancy is deliberately ignored (measured). */
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements(
    nvmlDevice_t device, unsigned int profileId, hydmiGpuInstancePlacement_t *placements,
    unsigned int *count)
{
    if (!count || !placements)
        return SIM_ERROR_INVALID_ARGUMENT;
    CALL_OPEN(ctx, 0);
    unsigned card;
    const sim_profile *p;
    int rc = dev_profile(ctx, device, profileId, &card, &p);
    if (rc != SIM_SUCCESS)
        return call_done(ctx, rc);
    if (p->nplacements > *count) {
        *count = p->nplacements;
        return call_done(ctx, SIM_ERROR_INSUFFICIENT_SIZE);
    }
    for (unsigned i = 0; i < p->nplacements; i++) {
        placements[i].start = p->starts[i];
        placements[i].size = p->slices;
    }
    *count = p->nplacements;
    return call_done(ctx, SIM_SUCCESS);
}

static unsigned remaining_capacity(const sim_ctx *ctx, unsigned card, const sim_profile *p)
{
    unsigned taken = occupied_mask(ctx, card), n = 0, existing = 0;
    for (unsigned i = 0; i < p->nplacements; i++) {
        unsigned m = span_mask(p->starts[i], p->slices);
        if (!(taken & m)) {
            taken |= m;
            n++;
        }
    }
    for (unsigned i = 0; i < ctx->inst.ngis; i++)
        if (ctx->inst.gis[i].card == card && ctx->inst.gis[i].profile_id == p->id)
            existing++;
    unsigned cap = p->gi_count_max > existing ? p->gi_count_max - existing : 0;
    return n < cap ? n : cap;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device,
                                                              unsigned int profileId,
                                                              unsigned int *count)
{
    if (!count)
        return SIM_ERROR_INVALID_ARGUMENT;
    CALL_OPEN(ctx, 0);
    unsigned card;
    const sim_profile *p;
    int rc = dev_profile(ctx, device, profileId, &card, &p);
    if (rc == SIM_SUCCESS)
        *count = remaining_capacity(ctx, card, p);
    return call_done(ctx, rc);
}

/* Driver-assigned ids: the lowest free id from the model's base, so a freed id returns at once. */
static unsigned next_gi_id(sim_ctx *ctx, unsigned card)
{
    for (unsigned id = ctx->node.gi_id_base;; id++)
        if (!sim_find_gi(ctx, card, id))
            return id;
}

EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(
    nvmlDevice_t device, unsigned int profileId, const hydmiGpuInstancePlacement_t *placement,
    nvmlGpuInstance_t *gpuInstance)
{
    if (!placement || !gpuInstance)
        return SIM_ERROR_INVALID_ARGUMENT;
    CALL_OPEN(ctx, 1);
    unsigned card;
    const sim_profile *p;
    int rc = dev_profile(ctx, device, profileId, &card, &p);
    if (rc != SIM_SUCCESS)
        return call_done(ctx, rc);
    if (!ctx->mode)
        return call_done(ctx, SIM_ERROR_NOT_SUPPORTED);
    int legal = 0;
    for (unsigned i = 0; i < p->nplacements; i++)
        legal |= p->starts[i] == placement->start && p->slices == placement->size;
    if (!legal)
        return call_done(ctx, SIM_ERROR_INVALID_ARGUMENT);
    if (occupied_mask(ctx, card) & span_mask(placement->start, placement->size))
        return call_done(ctx, SIM_ERROR_INSUFFICIENT_RESOURCES);
    if (remaining_capacity(ctx, card, p) == 0 || ctx->inst.ngis >= SIM_MAX_GIS)
        return call_done(ctx, SIM_ERROR_INSUFFICIENT_RESOURCES);
    rc = sim_take_fault(ctx, "gi_create");
    if (rc != SIM_SUCCESS)
        return call_done(ctx, rc);
    if (sim_registry_ensure(ctx) != 0)
        return call_done(ctx, SIM_ERROR_UNKNOWN);

    sim_gi *g = &ctx->inst.gis[ctx->inst.ngis];
    *g = (sim_gi){card, next_gi_id(ctx, card), p->id, placement->start, placement->size,
                  ctx->inst.next_serial++};
    char name[64], path[PATH_MAX + 128], body[1024];
    sim_gi_conf_name(card, g->id, name, sizeof(name));
    sim_render_gi_conf(ctx, g, body, sizeof(body));
    if (registry_path(ctx, "gi", name, path, sizeof(path)) != 0 || sim_write_file(path, body) != 0)
        return call_done(ctx, SIM_ERROR_UNKNOWN);
    ctx->inst.ngis++;
    if (sim_commit(ctx) != SIM_SUCCESS)
        return call_done(ctx, SIM_ERROR_UNKNOWN);
    sim_ops_log(ctx, "create_gi card=%u gi=%u profile=%u placement=%u:%u", card, g->id, g->profile_id,
                g->start, g->size);
    void *h = gi_handle(ctx, g);
    if (!h)
        return call_done(ctx, SIM_ERROR_MEMORY);
    *gpuInstance = h;
    return call_done(ctx, SIM_SUCCESS);
}

/* Filtered by profile id: a caller lists a card by asking once per profile (measured). */
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId,
                                              nvmlGpuInstance_t *gpuInstances,
                                              unsigned int *count)
{
    if (!count || !gpuInstances)
        return SIM_ERROR_INVALID_ARGUMENT;
    CALL_OPEN(ctx, 0);
    unsigned card;
    const sim_profile *p;
    int rc = dev_profile(ctx, device, profileId, &card, &p);
    if (rc != SIM_SUCCESS)
        return call_done(ctx, rc);
    unsigned n = 0;
    for (unsigned i = 0; i < ctx->inst.ngis; i++)
        if (ctx->inst.gis[i].card == card && ctx->inst.gis[i].profile_id == profileId)
            n++;
    if (n > *count) {
        *count = n;
        return call_done(ctx, SIM_ERROR_INSUFFICIENT_SIZE);
    }
    n = 0;
    for (unsigned i = 0; i < ctx->inst.ngis; i++) {
        const sim_gi *g = &ctx->inst.gis[i];
        if (g->card != card || g->profile_id != profileId)
            continue;
        void *h = gi_handle(ctx, g);
        if (!h)
            return call_done(ctx, SIM_ERROR_MEMORY);
        gpuInstances[n++] = h;
    }
    *count = n;
    return call_done(ctx, SIM_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                                 nvmlGpuInstance_t *gpuInstance)
{
    if (!gpuInstance)
        return SIM_ERROR_INVALID_ARGUMENT;
    CALL_OPEN(ctx, 0);
    unsigned card;
    int rc = resolve_dev(ctx, device, &card);
    if (rc != SIM_SUCCESS)
        return call_done(ctx, rc);
    sim_gi *g = sim_find_gi(ctx, card, id);
    if (!g)
        return call_done(ctx, SIM_ERROR_NOT_FOUND);
    void *h = gi_handle(ctx, g);
    if (!h)
        return call_done(ctx, SIM_ERROR_MEMORY);
    *gpuInstance = h;
    return call_done(ctx, SIM_SUCCESS);
}

/* ---------------------------------------------------------------- GPU-instance ops ------- */
EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance,
                                           hydmiGpuInstanceInfo_t *info)
{
    if (!info)
        return SIM_ERROR_INVALID_ARGUMENT;
    CALL_OPEN(ctx, 0);
    sim_gi *g;
    int rc = resolve_gi(ctx, gpuInstance, &g);
    if (rc != SIM_SUCCESS)
        return call_done(ctx, rc);
    void *d = dev_handle(ctx, g->card);
    if (!d)
        return call_done(ctx, SIM_ERROR_MEMORY);
    info->device = d;
    info->id = g->id;
    info->profile_id = g->profile_id;
    info->placement.start = g->start;
    info->placement.size = g->size;
    return call_done(ctx, SIM_SUCCESS);
}

/* Only the whole-GI compute profile is offered; its index is the GI's width index. */
EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(
    nvmlGpuInstance_t gpuInstance, unsigned int profileIndex, unsigned int engProfile,
    hydmiComputeInstanceProfileInfo_t *info)
{
    if (!info || engProfile != HYDMI_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
        return SIM_ERROR_INVALID_ARGUMENT;
    CALL_OPEN(ctx, 0);
    sim_gi *g;
    int rc = resolve_gi(ctx, gpuInstance, &g);
    if (rc != SIM_SUCCESS)
        return call_done(ctx, rc);
    const sim_profile *p = sim_profile_by_id(&ctx->node, g->profile_id);
    if (!p || profileIndex != ci_profile_id_for(g->size))
        return call_done(ctx, SIM_ERROR_INVALID_ARGUMENT);
    memset(info, 0, sizeof(*info));
    info->id = ci_profile_id_for(g->size);
    info->ci_count_max = 1;
    info->cu_count = p->cu_count;
    info->gpu_slice_count = p->slices;
    profile_name(p, info->name, sizeof(info->name));
    return call_done(ctx, SIM_SUCCESS);
}

EXPORT nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance,
                                                         unsigned int profileId,
                                                         nvmlComputeInstance_t *computeInstance)
{
    if (!computeInstance)
        return SIM_ERROR_INVALID_ARGUMENT;
    CALL_OPEN(ctx, 1);
    sim_gi *g;
    int rc = resolve_gi(ctx, gpuInstance, &g);
    if (rc != SIM_SUCCESS)
        return call_done(ctx, rc);
    if (profileId != ci_profile_id_for(g->size))
        return call_done(ctx, SIM_ERROR_INVALID_ARGUMENT);
    for (unsigned i = 0; i < ctx->inst.ncis; i++)
        if (ctx->inst.cis[i].card == g->card && ctx->inst.cis[i].gi_id == g->id)
            return call_done(ctx, SIM_ERROR_INSUFFICIENT_RESOURCES);
    rc = sim_take_fault(ctx, "ci_create");
    if (rc != SIM_SUCCESS)
        return call_done(ctx, rc);
    if (sim_registry_ensure(ctx) != 0)
        return call_done(ctx, SIM_ERROR_UNKNOWN);
    sim_ci *c = &ctx->inst.cis[ctx->inst.ncis];
    *c = (sim_ci){g->card, g->id, 0, profileId, ctx->inst.next_serial++, ""};
    char name[64], path[PATH_MAX + 128], body[2048];
    sim_ci_conf_name(c->card, c->gi_id, c->id, name, sizeof(name));
    if (registry_path(ctx, "ci", name, path, sizeof(path)) != 0)
        return call_done(ctx, SIM_ERROR_UNKNOWN);
    /* Poison (measured): a directory left on the conf name blocks this id for good. */
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return call_done(ctx, SIM_ERROR_INSUFFICIENT_RESOURCES);
    sim_new_uuid(c->uuid); /* fresh on every create, even at the same id and placement */
    sim_render_ci_conf(ctx, g, c, body, sizeof(body));
    if (sim_write_file(path, body) != 0)
        return call_done(ctx, SIM_ERROR_UNKNOWN);
    ctx->inst.ncis++;
    if (sim_commit(ctx) != SIM_SUCCESS)
        return call_done(ctx, SIM_ERROR_UNKNOWN);
    sim_ops_log(ctx, "create_ci card=%u gi=%u ci=%u profile=%u uuid=%s", c->card, c->gi_id, c->id,
                c->profile_id, c->uuid);
    void *h = ci_handle(ctx, c, H_CI);
    if (!h)
        return call_done(ctx, SIM_ERROR_MEMORY);
    *computeInstance = h;
    return call_done(ctx, SIM_SUCCESS);
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance,
                                                       unsigned int profileId,
                                                       nvmlComputeInstance_t *computeInstances,
                                                       unsigned int *count)
{
    if (!count || !computeInstances)
        return SIM_ERROR_INVALID_ARGUMENT;
    CALL_OPEN(ctx, 0);
    sim_gi *g;
    int rc = resolve_gi(ctx, gpuInstance, &g);
    if (rc != SIM_SUCCESS)
        return call_done(ctx, rc);
    if (profileId != ci_profile_id_for(g->size))
        return call_done(ctx, SIM_ERROR_INVALID_ARGUMENT);
    unsigned n = 0;
    for (unsigned i = 0; i < ctx->inst.ncis; i++) {
        const sim_ci *c = &ctx->inst.cis[i];
        n += c->card == g->card && c->gi_id == g->id && c->profile_id == profileId;
    }
    if (n > *count) {
        *count = n;
        return call_done(ctx, SIM_ERROR_INSUFFICIENT_SIZE);
    }
    n = 0;
    for (unsigned i = 0; i < ctx->inst.ncis; i++) {
        const sim_ci *c = &ctx->inst.cis[i];
        if (c->card != g->card || c->gi_id != g->id || c->profile_id != profileId)
            continue;
        void *h = ci_handle(ctx, c, H_CI);
        if (!h)
            return call_done(ctx, SIM_ERROR_MEMORY);
        computeInstances[n++] = h;
    }
    *count = n;
    return call_done(ctx, SIM_SUCCESS);
}

EXPORT nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance)
{
    CALL_OPEN(ctx, 1);
    sim_gi *g;
    int rc = resolve_gi(ctx, gpuInstance, &g);
    if (rc != SIM_SUCCESS)
        return call_done(ctx, rc);
    for (unsigned i = 0; i < ctx->inst.ncis; i++)
        if (ctx->inst.cis[i].card == g->card && ctx->inst.cis[i].gi_id == g->id)
            return call_done(ctx, SIM_ERROR_IN_USE);
    rc = sim_take_fault(ctx, "gi_destroy");
    if (rc != SIM_SUCCESS)
        return call_done(ctx, rc);
    unsigned card = g->card, id = g->id;
    *g = ctx->inst.gis[--ctx->inst.ngis];
    char name[64], path[PATH_MAX + 128];
    sim_gi_conf_name(card, id, name, sizeof(name));
    if (registry_path(ctx, "gi", name, path, sizeof(path)) == 0)
        unlink(path);
    if (sim_commit(ctx) != SIM_SUCCESS)
        return call_done(ctx, SIM_ERROR_UNKNOWN);
    sim_ops_log(ctx, "destroy_gi card=%u gi=%u", card, id);
    return call_done(ctx, SIM_SUCCESS);
}

/* ---------------------------------------------------------------- compute-instance ops --- */
EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance,
                                               hydmiComputeInstanceInfo_t *info)
{
    if (!info)
        return SIM_ERROR_INVALID_ARGUMENT;
    CALL_OPEN(ctx, 0);
    sim_ci *c;
    int rc = resolve_ci(ctx, computeInstance, H_CI, &c);
    if (rc != SIM_SUCCESS)
        return call_done(ctx, rc);
    sim_gi *g = sim_find_gi(ctx, c->card, c->gi_id);
    if (!g)
        return call_done(ctx, SIM_ERROR_UNKNOWN);
    void *d = dev_handle(ctx, c->card), *gh = gi_handle(ctx, g);
    if (!d || !gh)
        return call_done(ctx, SIM_ERROR_MEMORY);
    info->device = d;
    info->gpu_instance = gh;
    info->id = c->id;
    info->profile_id = c->profile_id;
    info->placement.start = 0; /* relative to the GPU instance: the whole GI */
    info->placement.size = g->size;
    return call_done(ctx, SIM_SUCCESS);
}

EXPORT nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance)
{
    CALL_OPEN(ctx, 1);
    sim_ci *c;
    int rc = resolve_ci(ctx, computeInstance, H_CI, &c);
    if (rc != SIM_SUCCESS)
        return call_done(ctx, rc);
    char name[64], path[PATH_MAX + 128];
    sim_ci_conf_name(c->card, c->gi_id, c->id, name, sizeof(name));
    if (registry_path(ctx, "ci", name, path, sizeof(path)) != 0)
        return call_done(ctx, SIM_ERROR_UNKNOWN);
    /* A process using the instance (here: holding its conf file open) blocks the destroy. */
    if (sim_path_held(path))
        return call_done(ctx, SIM_ERROR_IN_USE);
    rc = sim_take_fault(ctx, "ci_destroy");
    if (rc != SIM_SUCCESS)
        return call_done(ctx, rc);
    unsigned card = c->card, gi = c->gi_id, id = c->id;
    *c = ctx->inst.cis[--ctx->inst.ncis];
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISREG(st.st_mode))
        unlink(path);
    if (sim_commit(ctx) != SIM_SUCCESS)
        return call_done(ctx, SIM_ERROR_UNKNOWN);
    sim_ops_log(ctx, "destroy_ci card=%u gi=%u ci=%u", card, gi, id);
    return call_done(ctx, SIM_SUCCESS);
}

/* ---------------------------------------------------------------- MIG device handles ----- */
EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    if (!count)
        return SIM_ERROR_INVALID_ARGUMENT;
    CALL_OPEN(ctx, 0);
    unsigned card;
    int rc = resolve_dev(ctx, device, &card);
    if (rc == SIM_SUCCESS)
        *count = ctx->node.slices;
    return call_done(ctx, rc);
}

static int ci_order(const void *a, const void *b)
{
    const sim_ci *x = a, *y = b;
    if (x->card != y->card)
        return x->card < y->card ? -1 : 1;
    if (x->gi_id != y->gi_id)
        return x->gi_id < y->gi_id ? -1 : 1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

/* Measured: the index space is node-global, not per card; the parent handle only has to be
 * a valid device. */
EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                        nvmlDevice_t *migDevice)
{
    if (!migDevice)
        return SIM_ERROR_INVALID_ARGUMENT;
    CALL_OPEN(ctx, 0);
    unsigned card;
    int rc = resolve_dev(ctx, device, &card);
    if (rc != SIM_SUCCESS)
        return call_done(ctx, rc);
    qsort(ctx->inst.cis, ctx->inst.ncis, sizeof(sim_ci), ci_order);
    if (index >= ctx->inst.ncis)
        return call_done(ctx, SIM_ERROR_NOT_FOUND);
    void *h = ci_handle(ctx, &ctx->inst.cis[index], H_MIG);
    if (!h)
        return call_done(ctx, SIM_ERROR_MEMORY);
    *migDevice = h;
    return call_done(ctx, SIM_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    if (!id)
        return SIM_ERROR_INVALID_ARGUMENT;
    CALL_OPEN(ctx, 0);
    sim_ci *c;
    int rc = resolve_ci(ctx, device, H_MIG, &c);
    if (rc == SIM_SUCCESS)
        *id = c->gi_id;
    return call_done(ctx, rc);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    if (!id)
        return SIM_ERROR_INVALID_ARGUMENT;
    CALL_OPEN(ctx, 0);
    sim_ci *c;
    int rc = resolve_ci(ctx, device, H_MIG, &c);
    if (rc == SIM_SUCCESS)
        *id = c->id;
    return call_done(ctx, rc);
}

/* ---------------------------------------------------------------- simulator only --------- */
/* hydmiSim* symbols do not exist in the vendor library: a test reads this table to check the
 * struct layouts compiled here against the sizes/offsets it derives from docs/dev/hardware.md. */
typedef struct {
    const char *name;
    unsigned long value;
} hydmiSimLayoutEntry;

#define SZ(t) {#t ".sizeof", sizeof(t)}
#define OF(t, f) {#t "." #f, offsetof(t, f)}

EXPORT const hydmiSimLayoutEntry hydmiSimLayout[] = {
    SZ(hydmiGpuInstanceProfileInfo_t),
    OF(hydmiGpuInstanceProfileInfo_t, id),
    OF(hydmiGpuInstanceProfileInfo_t, gi_count_max),
    OF(hydmiGpuInstanceProfileInfo_t, cu_count),
    OF(hydmiGpuInstanceProfileInfo_t, gpu_slice_count),
    OF(hydmiGpuInstanceProfileInfo_t, memory_size_MB),
    OF(hydmiGpuInstanceProfileInfo_t, name),
    SZ(hydmiComputeInstanceProfileInfo_t),
    OF(hydmiComputeInstanceProfileInfo_t, id),
    OF(hydmiComputeInstanceProfileInfo_t, ci_count_max),
    OF(hydmiComputeInstanceProfileInfo_t, cu_count),
    OF(hydmiComputeInstanceProfileInfo_t, gpu_slice_count),
    OF(hydmiComputeInstanceProfileInfo_t, name),
    SZ(hydmiGpuInstancePlacement_t),
    OF(hydmiGpuInstancePlacement_t, start),
    OF(hydmiGpuInstancePlacement_t, size),
    SZ(hydmiGpuInstanceInfo_t),
    OF(hydmiGpuInstanceInfo_t, device),
    OF(hydmiGpuInstanceInfo_t, id),
    OF(hydmiGpuInstanceInfo_t, profile_id),
    OF(hydmiGpuInstanceInfo_t, placement),
    SZ(hydmiComputeInstanceInfo_t),
    OF(hydmiComputeInstanceInfo_t, device),
    OF(hydmiComputeInstanceInfo_t, gpu_instance),
    OF(hydmiComputeInstanceInfo_t, id),
    OF(hydmiComputeInstanceInfo_t, profile_id),
    OF(hydmiComputeInstanceInfo_t, placement),
    SZ(hydmiDeviceAttributes_t),
    OF(hydmiDeviceAttributes_t, index),
    OF(hydmiDeviceAttributes_t, cu_count),
    OF(hydmiDeviceAttributes_t, memory_size_MB),
    OF(hydmiDeviceAttributes_t, uuid),
    OF(hydmiDeviceAttributes_t, name),
    OF(hydmiDeviceAttributes_t, gpu_instance_slice_count),
    OF(hydmiDeviceAttributes_t, compute_instance_slice_count),
    SZ(hydmiMemory_t),
    OF(hydmiMemory_t, total),
    OF(hydmiMemory_t, free),
    OF(hydmiMemory_t, used),
    SZ(hydmiUtilization_t),
    OF(hydmiUtilization_t, gpu),
    OF(hydmiUtilization_t, memory),
    SZ(hydmiPciInfo_t),
    OF(hydmiPciInfo_t, domain),
    OF(hydmiPciInfo_t, bus),
    OF(hydmiPciInfo_t, device),
    OF(hydmiPciInfo_t, function),
    OF(hydmiPciInfo_t, bus_id),
    {NULL, 0},
};
