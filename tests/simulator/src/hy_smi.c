/* hy-smi: the parts of the vendor CLI the product depends on, driving libhydmi_mig.so.1 (and,
 * for `virtual`, libhydmi.so) the way a vendor tool would (dlopen, RTLD_LOCAL). Messages marked
 * "measured" or "fact" are the vendor's own; every other message is ours and documented as such
 * in README.md. */
#define _GNU_SOURCE
#include "dmi_types.h"
#include "hydmi_types.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MSG_ENABLED "Enabled mig mode successful."           /* measured */
#define MSG_DISABLED "Disabled mig mode successful."         /* ours: not measured */
#define MSG_BUSY                                                                               \
    "Error: Set system level mig mode failed. The device is exist and may be in use." /* measured */
#define MSG_INSTANCES "Error: Set system level mig mode failed. GPU instances still exist." /* ours */
#define MSG_BAD_ARGS "Invlaid arguments" /* measured, including the vendor's spelling */
#define MSG_VDEVS "Error: Set system level mig mode failed. Virtual devices still exist." /* ours */
#define MSG_VCREATED "The virtual device is created successfully!" /* docs/dev/hardware.md */
#define MSG_VDESTROYED "The virtual device is destroyed successfully!" /* ours */

#define MAX_ITEMS 32

static void *lib;

static void *sym(const char *name)
{
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "Error: %s not found in the management library\n", name);
        exit(3);
    }
    return p;
}

#define CALL(name, ...) ((nvmlReturn_t(*)())sym(#name))(__VA_ARGS__)

static const char *err_text(nvmlReturn_t rc)
{
    switch (rc) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 9: return "Driver Not Loaded";
    case 19: return "In use by another client";
    case 20: return "Insufficient Memory";
    case 23: return "Insufficient Resources";
    default: return "Unknown Error";
    }
}

/* `env` names an override; otherwise `name` next to this executable. */
static void *open_library(const char *env, const char *name, int quiet)
{
    const char *path = getenv(env);
    char buf[PATH_MAX];
    if (!path || !*path) {
        ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 32);
        if (n <= 0)
            return NULL;
        buf[n] = '\0';
        char *slash = strrchr(buf, '/');
        if (!slash)
            return NULL;
        strcpy(slash + 1, name);
        path = buf;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h && !quiet)
        fprintf(stderr, "Error: cannot load the management library %s: %s\n", path, dlerror());
    return h;
}

static int load_library(void)
{
    lib = open_library("HYDMI_SIM_LIB", "libhydmi_mig.so.1", 0);
    return lib ? 0 : -1;
}

/* ------------------------------------------------------------------ libhydmi.so ------------ */
static void *dmilib;

static void *dmi_sym(const char *name)
{
    void *p = dlsym(dmilib, name);
    if (!p) {
        fprintf(stderr, "Error: %s not found in the virtual-device library\n", name);
        exit(3);
    }
    return p;
}

#define DCALL(name, ...) ((dmiStatus(*)())dmi_sym(#name))(__VA_ARGS__)

static const char *dmi_text(dmiStatus rc)
{
    const char *text = NULL;
    if (DCALL(dmiGetStatusString, rc, &text) != DMI_STATUS_SUCCESS || !text)
        return "Unknown error";
    return text;
}

/* Live virtual devices on the node, or -1 when libhydmi.so cannot say. */
static int vdev_count(void)
{
    if (!dmilib)
        dmilib = open_library("HYDMI_SIM_DMI_LIB", "libhydmi.so", 1);
    int n = 0;
    if (!dmilib || DCALL(dmiGetVDeviceCount, &n) != DMI_STATUS_SUCCESS)
        return -1;
    return n;
}

/* Simulator fault hook (simnode fault hysmi-output): ROOT/.sim/hysmi_fault holds
 * "<exit code> <apply 0|1>" then the text to print instead of the real answer. */
static int injected_mode_answer(unsigned mode)
{
    const char *root = getenv("HYDMI_SIM_ROOT");
    if (!root)
        return -1;
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/.sim/hysmi_fault", root);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int code = 1, apply = 0;
    if (fscanf(f, "%d %d", &code, &apply) != 2) {
        fclose(f);
        return -1;
    }
    int ch = fgetc(f);
    while (ch != EOF && ch != '\n')
        ch = fgetc(f);
    if (apply) {
        nvmlReturn_t status = 0;
        CALL(nvmlSetSystemMigMode, mode, &status);
    }
    char text[4096];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    text[n] = '\0';
    fclose(f);
    fputs(text, stdout);
    return code;
}

static unsigned card_count(void)
{
    unsigned n = 0;
    nvmlReturn_t rc = CALL(nvmlDeviceGetCount, &n);
    if (rc != 0) {
        printf("Error: failed to count devices: %s\n", err_text(rc));
        exit(1);
    }
    return n;
}

typedef struct {
    hydmiGpuInstanceProfileInfo_t info[MAX_ITEMS];
    unsigned n;
} profile_list;

/* Width sweep: index = slice count - 1; INVALID_ARGUMENT is a normal gap. */
static void list_profiles(nvmlDevice_t dev, profile_list *out)
{
    hydmiDeviceAttributes_t attr;
    out->n = 0;
    if (CALL(nvmlDeviceGetAttributes, dev, &attr) != 0)
        return;
    for (unsigned w = 0; w < attr.gpu_instance_slice_count && out->n < MAX_ITEMS; w++)
        if (CALL(nvmlDeviceGetGpuInstanceProfileInfo, dev, w, &out->info[out->n]) == 0)
            out->n++;
}

static const char *short_name(const char *name)
{
    const char *sp = strrchr(name, ' ');
    return sp ? sp + 1 : name;
}

static unsigned total_gpu_instances(void)
{
    unsigned total = 0, n = card_count();
    for (unsigned c = 0; c < n; c++) {
        nvmlDevice_t dev;
        if (CALL(nvmlDeviceGetHandleByIndex, c, &dev) != 0)
            continue;
        profile_list pl;
        list_profiles(dev, &pl);
        for (unsigned i = 0; i < pl.n; i++) {
            nvmlGpuInstance_t gis[MAX_ITEMS];
            unsigned cnt = MAX_ITEMS;
            if (CALL(nvmlDeviceGetGpuInstances, dev, pl.info[i].id, gis, &cnt) == 0)
                total += cnt;
        }
    }
    return total;
}

static int set_mode(unsigned mode)
{
    int injected = injected_mode_answer(mode);
    if (injected >= 0)
        return injected;
    if (mode == HYDMI_MIG_DISABLE && total_gpu_instances() > 0) {
        puts(MSG_INSTANCES);
        return 1;
    }
    /* The library refuses too (IN_USE); asking first lets the message name the reason. */
    if (mode == HYDMI_MIG_ENABLE && vdev_count() > 0) {
        puts(MSG_VDEVS);
        return 1;
    }
    nvmlReturn_t status = 0;
    nvmlReturn_t rc = CALL(nvmlSetSystemMigMode, mode, &status);
    if (rc == 0) {
        puts(mode ? MSG_ENABLED : MSG_DISABLED);
        return 0;
    }
    if (rc == 19) {
        puts(MSG_BUSY);
        return 1;
    }
    printf("Error: Set system level mig mode failed. %s\n", err_text(rc));
    return 1;
}

/* ------------------------------------------------------------------ mig subcommands ------- */
typedef struct {
    int cgi, dgi, dci, lgi, lci, lgip, with_ci;
    const char *profiles;
    int card; /* -1: every card */
    int gi_id, ci_id;
} mig_args;

static int parse_uint(const char *s, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < 0 || v > 1000000)
        return -1;
    *out = (int)v;
    return 0;
}

static int each_card(int card, unsigned *first, unsigned *last)
{
    unsigned n = card_count();
    if (card >= 0) {
        if ((unsigned)card >= n) {
            printf("Error: no device with index %d\n", card);
            return -1;
        }
        *first = *last = (unsigned)card;
    } else {
        if (n == 0)
            return -1;
        *first = 0;
        *last = n - 1;
    }
    return 0;
}

static int ci_profile_for(nvmlGpuInstance_t gi, unsigned slices,
                          hydmiComputeInstanceProfileInfo_t *out)
{
    for (unsigned w = 0; w < slices; w++)
        if (CALL(nvmlGpuInstanceGetComputeInstanceProfileInfo, gi, w,
                 HYDMI_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, out) == 0 &&
            out->gpu_slice_count == slices)
            return 0;
    return -1;
}

static int occupied(nvmlDevice_t dev, const profile_list *pl, unsigned *mask)
{
    *mask = 0;
    for (unsigned i = 0; i < pl->n; i++) {
        nvmlGpuInstance_t gis[MAX_ITEMS];
        unsigned cnt = MAX_ITEMS;
        if (CALL(nvmlDeviceGetGpuInstances, dev, pl->info[i].id, gis, &cnt) != 0)
            return -1;
        for (unsigned k = 0; k < cnt; k++) {
            hydmiGpuInstanceInfo_t gi;
            if (CALL(nvmlGpuInstanceGetInfo, gis[k], &gi) == 0)
                *mask |= ((1u << gi.placement.size) - 1u) << gi.placement.start;
        }
    }
    return 0;
}

static int create_one(unsigned card, nvmlDevice_t dev, const profile_list *pl, const char *want,
                      int with_ci)
{
    const hydmiGpuInstanceProfileInfo_t *p = NULL;
    int want_id = -1;
    parse_uint(want, &want_id);
    for (unsigned i = 0; i < pl->n; i++)
        if ((int)pl->info[i].id == want_id || !strcmp(short_name(pl->info[i].name), want))
            p = &pl->info[i];
    if (!p) {
        printf("Unable to create a GPU instance on GPU %2u using profile %s: Not Found\n", card,
               want);
        return 1;
    }
    hydmiGpuInstancePlacement_t places[MAX_ITEMS];
    unsigned np = MAX_ITEMS, mask;
    nvmlReturn_t rc = CALL(nvmlDeviceGetGpuInstancePossiblePlacements, dev, p->id, places, &np);
    if (rc == 0 && occupied(dev, pl, &mask) != 0)
        rc = 999;
    int chosen = -1;
    for (unsigned i = 0; rc == 0 && i < np && chosen < 0; i++)
        if (!(mask & (((1u << places[i].size) - 1u) << places[i].start)))
            chosen = (int)i;
    if (rc == 0 && chosen < 0)
        rc = 23;
    nvmlGpuInstance_t gi = NULL;
    if (rc == 0)
        rc = CALL(nvmlDeviceCreateGpuInstanceWithPlacement, dev, p->id, &places[chosen], &gi);
    if (rc != 0) {
        printf("Unable to create a GPU instance on GPU %2u using profile %s: %s\n", card, want,
               err_text(rc));
        return 1;
    }
    hydmiGpuInstanceInfo_t info;
    CALL(nvmlGpuInstanceGetInfo, gi, &info);
    printf("Successfully created GPU instance ID %2u on GPU %2u using profile %s (ID %2u)\n",
           info.id, card, p->name, p->id);
    if (!with_ci)
        return 0;
    hydmiComputeInstanceProfileInfo_t cp;
    nvmlComputeInstance_t ci;
    rc = ci_profile_for(gi, p->gpu_slice_count, &cp) == 0 ? 0 : 3;
    if (rc == 0)
        rc = CALL(nvmlGpuInstanceCreateComputeInstance, gi, cp.id, &ci);
    if (rc != 0) {
        printf("Unable to create a compute instance on GPU %2u GPU instance ID %2u: %s\n", card,
               info.id, err_text(rc));
        return 1;
    }
    hydmiComputeInstanceInfo_t cinfo;
    CALL(nvmlComputeInstanceGetInfo, ci, &cinfo);
    printf("Successfully created compute instance ID %2u on GPU %2u GPU instance ID %2u using "
           "profile %s (ID %2u)\n",
           cinfo.id, card, info.id, cp.name, cp.id);
    return 0;
}

typedef int (*gi_visitor)(unsigned card, const hydmiGpuInstanceProfileInfo_t *p,
                          nvmlGpuInstance_t gi, const hydmiGpuInstanceInfo_t *info,
                          const mig_args *a, int *found);

static int walk_gis(const mig_args *a, gi_visitor visit, int *found)
{
    unsigned first, last;
    if (each_card(a->card, &first, &last) != 0)
        return a->card >= 0 ? 1 : 0;
    int failed = 0;
    for (unsigned c = first; c <= last; c++) {
        nvmlDevice_t dev;
        nvmlReturn_t rc = CALL(nvmlDeviceGetHandleByIndex, c, &dev);
        if (rc != 0) {
            printf("Error: GPU %u: %s\n", c, err_text(rc));
            failed = 1;
            continue;
        }
        profile_list pl;
        list_profiles(dev, &pl);
        for (unsigned i = 0; i < pl.n; i++) {
            nvmlGpuInstance_t gis[MAX_ITEMS];
            unsigned cnt = MAX_ITEMS;
            if (CALL(nvmlDeviceGetGpuInstances, dev, pl.info[i].id, gis, &cnt) != 0)
                continue;
            for (unsigned k = 0; k < cnt; k++) {
                hydmiGpuInstanceInfo_t info;
                if (CALL(nvmlGpuInstanceGetInfo, gis[k], &info) != 0)
                    continue;
                if (a->gi_id >= 0 && (int)info.id != a->gi_id)
                    continue;
                failed |= visit(c, &pl.info[i], gis[k], &info, a, found);
            }
        }
    }
    return failed;
}

static int destroy_cis(unsigned card, const hydmiGpuInstanceProfileInfo_t *p,
                       nvmlGpuInstance_t gi, const hydmiGpuInstanceInfo_t *info,
                       const mig_args *a, int *found)
{
    hydmiComputeInstanceProfileInfo_t cp;
    if (ci_profile_for(gi, p->gpu_slice_count, &cp) != 0)
        return 0;
    nvmlComputeInstance_t cis[MAX_ITEMS];
    unsigned cnt = MAX_ITEMS;
    if (CALL(nvmlGpuInstanceGetComputeInstances, gi, cp.id, cis, &cnt) != 0)
        return 1;
    int failed = 0;
    for (unsigned k = 0; k < cnt; k++) {
        hydmiComputeInstanceInfo_t ci;
        if (CALL(nvmlComputeInstanceGetInfo, cis[k], &ci) != 0)
            continue;
        if (a->ci_id >= 0 && (int)ci.id != a->ci_id)
            continue;
        (*found)++;
        nvmlReturn_t rc = CALL(nvmlComputeInstanceDestroy, cis[k]);
        if (rc == 0) {
            printf("Successfully destroyed compute instance ID %2u from GPU %2u GPU instance ID "
                   "%2u\n",
                   ci.id, card, info->id);
        } else {
            printf("Unable to destroy compute instance ID %2u from GPU %2u GPU instance ID %2u: "
                   "%s\n",
                   ci.id, card, info->id, err_text(rc));
            failed = 1;
        }
    }
    return failed;
}

static int destroy_gi(unsigned card, const hydmiGpuInstanceProfileInfo_t *p, nvmlGpuInstance_t gi,
                      const hydmiGpuInstanceInfo_t *info, const mig_args *a, int *found)
{
    (void)p;
    (void)a;
    (*found)++;
    nvmlReturn_t rc = CALL(nvmlGpuInstanceDestroy, gi);
    if (rc == 0) {
        printf("Successfully destroyed GPU instance ID %2u from GPU %2u\n", info->id, card);
        return 0;
    }
    printf("Unable to destroy GPU instance ID %2u from GPU %2u: %s\n", info->id, card,
           err_text(rc));
    return 1;
}

static int list_gi(unsigned card, const hydmiGpuInstanceProfileInfo_t *p, nvmlGpuInstance_t gi,
                   const hydmiGpuInstanceInfo_t *info, const mig_args *a, int *found)
{
    (void)gi;
    (void)a;
    (*found)++;
    printf("%-5u %-6u %-11u %-12s %u:%u\n", card, info->id, p->id, short_name(p->name),
           info->placement.start, info->placement.size);
    return 0;
}

static int list_ci(unsigned card, const hydmiGpuInstanceProfileInfo_t *p, nvmlGpuInstance_t gi,
                   const hydmiGpuInstanceInfo_t *info, const mig_args *a, int *found)
{
    hydmiComputeInstanceProfileInfo_t cp;
    if (ci_profile_for(gi, p->gpu_slice_count, &cp) != 0)
        return 0;
    nvmlComputeInstance_t cis[MAX_ITEMS];
    unsigned cnt = MAX_ITEMS;
    if (CALL(nvmlGpuInstanceGetComputeInstances, gi, cp.id, cis, &cnt) != 0)
        return 1;
    for (unsigned k = 0; k < cnt; k++) {
        hydmiComputeInstanceInfo_t ci;
        if (CALL(nvmlComputeInstanceGetInfo, cis[k], &ci) != 0)
            continue;
        if (a->ci_id >= 0 && (int)ci.id != a->ci_id)
            continue;
        (*found)++;
        printf("%-5u %-6u %-6u %-14u %s\n", card, info->id, ci.id, ci.profile_id,
               short_name(p->name));
    }
    return 0;
}

static int list_gip(const mig_args *a)
{
    unsigned first, last;
    if (each_card(a->card, &first, &last) != 0)
        return 1;
    printf("%-5s %-12s %-4s %-7s %-5s %-11s %-10s %s\n", "GPU", "PROFILE", "ID", "SLICES", "CUS",
           "MEMORY_MIB", "FREE/TOTAL", "PLACEMENTS");
    for (unsigned c = first; c <= last; c++) {
        nvmlDevice_t dev;
        if (CALL(nvmlDeviceGetHandleByIndex, c, &dev) != 0)
            continue;
        profile_list pl;
        list_profiles(dev, &pl);
        for (unsigned i = 0; i < pl.n; i++) {
            const hydmiGpuInstanceProfileInfo_t *p = &pl.info[i];
            unsigned remaining = 0, np = MAX_ITEMS;
            hydmiGpuInstancePlacement_t places[MAX_ITEMS];
            CALL(nvmlDeviceGetGpuInstanceRemainingCapacity, dev, p->id, &remaining);
            if (CALL(nvmlDeviceGetGpuInstancePossiblePlacements, dev, p->id, places, &np) != 0)
                np = 0;
            char ratio[32], where[256] = "";
            snprintf(ratio, sizeof(ratio), "%u/%u", remaining, p->gi_count_max);
            for (unsigned k = 0; k < np; k++) {
                char one[24];
                snprintf(one, sizeof(one), "%s%u:%u", k ? "," : "", places[k].start,
                         places[k].size);
                strncat(where, one, sizeof(where) - strlen(where) - 1);
            }
            printf("%-5u %-12s %-4u %-7u %-5u %-11llu %-10s %s\n", c, short_name(p->name), p->id,
                   p->gpu_slice_count, p->cu_count, p->memory_size_MB, ratio, where);
        }
    }
    return 0;
}

static int mig_command(int argc, char **argv)
{
    mig_args a = {0};
    a.card = a.gi_id = a.ci_id = -1;
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "-cgi") || !strcmp(o, "--create-gpu-instance")) {
            if (!v)
                goto bad;
            a.cgi = 1;
            a.profiles = v;
            i++;
        } else if (!strcmp(o, "-C") || !strcmp(o, "--default-compute-instance")) {
            a.with_ci = 1;
        } else if (!strcmp(o, "-dgi") || !strcmp(o, "--destroy-gpu-instance")) {
            a.dgi = 1;
        } else if (!strcmp(o, "-dci") || !strcmp(o, "--destroy-compute-instance")) {
            a.dci = 1;
        } else if (!strcmp(o, "-lgi") || !strcmp(o, "--list-gpu-instances")) {
            a.lgi = 1;
        } else if (!strcmp(o, "-lci") || !strcmp(o, "--list-compute-instances")) {
            a.lci = 1;
        } else if (!strcmp(o, "-lgip") || !strcmp(o, "--list-gpu-instance-profiles")) {
            a.lgip = 1;
        } else if (!strcmp(o, "-i") || !strcmp(o, "--id")) {
            if (!v || parse_uint(v, &a.card) != 0)
                goto bad;
            i++;
        } else if (!strcmp(o, "-gi") || !strcmp(o, "--gpu-instance-id")) {
            if (!v || parse_uint(v, &a.gi_id) != 0)
                goto bad;
            i++;
        } else if (!strcmp(o, "-ci") || !strcmp(o, "--compute-instance-id")) {
            if (!v || parse_uint(v, &a.ci_id) != 0)
                goto bad;
            i++;
        } else {
            goto bad;
        }
    }
    if (a.cgi + a.dgi + a.dci + a.lgi + a.lci + a.lgip != 1)
        goto bad;
    int found = 0, failed = 0;
    if (a.cgi) {
        unsigned first, last;
        if (each_card(a.card, &first, &last) != 0)
            return 1;
        for (unsigned c = first; c <= last; c++) {
            nvmlDevice_t dev;
            nvmlReturn_t rc = CALL(nvmlDeviceGetHandleByIndex, c, &dev);
            if (rc != 0) {
                printf("Error: GPU %u: %s\n", c, err_text(rc));
                failed = 1;
                continue;
            }
            profile_list pl;
            list_profiles(dev, &pl);
            char list[1024];
            snprintf(list, sizeof(list), "%s", a.profiles);
            for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok;
                 tok = strtok_r(NULL, ",", &save))
                failed |= create_one(c, dev, &pl, tok, a.with_ci);
        }
        return failed;
    }
    if (a.lgip)
        return list_gip(&a);
    if (a.lgi) {
        printf("%-5s %-6s %-11s %-12s %s\n", "GPU", "GI_ID", "PROFILE_ID", "PROFILE", "PLACEMENT");
        failed = walk_gis(&a, list_gi, &found);
    } else if (a.lci) {
        printf("%-5s %-6s %-6s %-14s %s\n", "GPU", "GI_ID", "CI_ID", "CI_PROFILE_ID", "PROFILE");
        failed = walk_gis(&a, list_ci, &found);
    } else if (a.dci) {
        failed = walk_gis(&a, destroy_cis, &found);
        if (!found && !failed)
            puts("No compute instances found.");
    } else if (a.dgi) {
        failed = walk_gis(&a, destroy_gi, &found);
        if (!found && !failed)
            puts("No GPU instances found.");
    }
    return failed;
bad:
    puts(MSG_BAD_ARGS);
    return 1;
}

/* ------------------------------------------------------------------ virtual subcommands --- */
static int parse_list(const char *s, int *out, int max)
{
    char buf[1024];
    int n = 0;
    snprintf(buf, sizeof(buf), "%s", s);
    if (!*buf || buf[strlen(buf) - 1] == ',')
        return -1;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (n >= max || parse_uint(tok, &out[n]) != 0)
            return -1;
        n++;
    }
    return n;
}

static int dmi_device_count(int *n)
{
    dmiStatus rc = DCALL(dmiGetDeviceCount, n);
    if (rc != DMI_STATUS_SUCCESS) {
        printf("Error: Query device failed. %s\n", dmi_text(rc));
        return -1;
    }
    return 0;
}

static void print_info(const char *title, int index, const dmiDeviceInfo *info)
{
    printf("%s %d:\n", title, index);
    printf("    Actual Device: %d\n", info->device_id);
    printf("    Compute units: %d\n", info->compute_unit_count);
    printf("    Global memory: %zu bytes\n", info->global_mem_size);
}

static int show_devices(void)
{
    int n;
    if (dmi_device_count(&n) != 0)
        return 1;
    for (int i = 0; i < n; i++) {
        dmiDeviceInfo info;
        dmiStatus rc = DCALL(dmiGetDeviceInfo, i, &info);
        if (rc != DMI_STATUS_SUCCESS) {
            printf("Error: Query device %d failed. %s\n", i, dmi_text(rc));
            return 1;
        }
        print_info("Device", i, &info);
    }
    return 0;
}

/* Every live vdev by id (ids are node-global, 0 .. cards * per-card maximum - 1). */
static int show_vdevices(void)
{
    int n, per_card = 0;
    if (dmi_device_count(&n) != 0)
        return 1;
    dmiStatus rc = DCALL(dmiGetMaxVDeviceCount, &per_card);
    if (rc != DMI_STATUS_SUCCESS) {
        printf("Error: Query virtual device failed. %s\n", dmi_text(rc));
        return 1;
    }
    for (int id = 0; id < n * per_card; id++) {
        dmiDeviceInfo info;
        rc = DCALL(dmiGetVDeviceInfo, id, &info);
        if (rc == DMI_STATUS_VDEV_NOT_EXIST)
            continue;
        if (rc != DMI_STATUS_SUCCESS) {
            printf("Error: Query virtual device %d failed. %s\n", id, dmi_text(rc));
            return 1;
        }
        print_info("Virtual Device", id, &info);
    }
    return 0;
}

static int destroy_vdevices(int card)
{
    int first = card, last = card;
    if (card < 0) {
        int n;
        if (dmi_device_count(&n) != 0)
            return 1;
        first = 0;
        last = n - 1;
    }
    int failed = 0;
    for (int c = first; c <= last; c++) {
        dmiStatus rc = DCALL(dmiDestroyVDevices, c);
        if (rc != DMI_STATUS_SUCCESS) {
            printf("Error: Destroy virtual device failed on device %d. %s\n", c, dmi_text(rc));
            failed = 1;
        }
    }
    if (!failed)
        puts(MSG_VDESTROYED);
    return failed;
}

static int virtual_command(int argc, char **argv)
{
    int show_dev = 0, show_vdev = 0, destroy = 0, create = -1, card = -1;
    int cus[MAX_ITEMS], mem[MAX_ITEMS], ncus = -1, nmem = -1;
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "-show-device-info")) {
            show_dev = 1;
        } else if (!strcmp(o, "-show-vdevice-info")) {
            show_vdev = 1;
        } else if (!strcmp(o, "-destroy-vdevice")) {
            destroy = 1;
        } else if (!strcmp(o, "-create-vdevices")) {
            if (!v || parse_uint(v, &create) != 0 || create < 1)
                goto bad;
            i++;
        } else if (!strcmp(o, "-d")) {
            if (!v || parse_uint(v, &card) != 0)
                goto bad;
            i++;
        } else if (!strcmp(o, "-vdevice-compute-units")) {
            if (!v || (ncus = parse_list(v, cus, MAX_ITEMS)) < 0)
                goto bad;
            i++;
        } else if (!strcmp(o, "-vdevice-memory-size")) {
            if (!v || (nmem = parse_list(v, mem, MAX_ITEMS)) < 0)
                goto bad;
            i++;
        } else {
            goto bad;
        }
    }
    if (show_dev + show_vdev + destroy + (create > 0) != 1)
        goto bad;
    if (create < 0 && (ncus >= 0 || nmem >= 0))
        goto bad;
    if ((show_dev || show_vdev) && card >= 0)
        goto bad;
    dmilib = open_library("HYDMI_SIM_DMI_LIB", "libhydmi.so", 0);
    if (!dmilib)
        return 2;
    if (show_dev)
        return show_devices();
    if (show_vdev)
        return show_vdevices();
    if (destroy)
        return destroy_vdevices(card);
    if (card < 0 || ncus != create || nmem != create)
        goto bad;
    dmiStatus rc = DCALL(dmiCreateVDevices, card, create, cus, mem);
    if (rc != DMI_STATUS_SUCCESS) {
        printf("Error: Create virtual device failed. %s\n", dmi_text(rc));
        return 1;
    }
    puts(MSG_VCREATED);
    return 0;
bad:
    puts(MSG_BAD_ARGS);
    return 1;
}

static int summary(void)
{
    unsigned cur = 0, pend = 0;
    nvmlReturn_t rc = CALL(nvmlGetSystemMigMode, &cur, &pend);
    if (rc != 0) {
        printf("Error: cannot read mig mode: %s\n", err_text(rc));
        return 1;
    }
    printf("MIG mode: %s\n", cur ? "Enabled" : "Disabled");
    unsigned n = card_count();
    for (unsigned c = 0; c < n; c++) {
        nvmlDevice_t dev;
        hydmiDeviceAttributes_t attr;
        if (CALL(nvmlDeviceGetHandleByIndex, c, &dev) != 0 ||
            CALL(nvmlDeviceGetAttributes, dev, &attr) != 0) {
            printf("DCU %u: unavailable\n", c);
            continue;
        }
        printf("DCU %u: cu_count=%u memory_mib=%llu slices=%u\n", c, attr.cu_count,
               attr.memory_size_MB, attr.gpu_instance_slice_count);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "virtual"))
        return virtual_command(argc - 2, argv + 2); /* needs libhydmi.so only */
    if (load_library() != 0)
        return 2;
    if (argc >= 2 && !strcmp(argv[1], "mig"))
        return mig_command(argc - 2, argv + 2);
    int mode = -1, has_i = 0, other = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-mig") || !strcmp(argv[i], "--multi-instance-gpu")) {
            if (i + 1 >= argc || parse_uint(argv[i + 1], &mode) != 0 || mode > 1) {
                puts(MSG_BAD_ARGS);
                return 1;
            }
            i++;
        } else if (!strcmp(argv[i], "-i") || !strcmp(argv[i], "--device")) {
            has_i = 1;
            if (i + 1 < argc)
                i++;
        } else {
            other = 1;
        }
    }
    if (mode >= 0) {
        /* The switch is node-wide: a device selector is refused (measured). */
        if (has_i || other) {
            puts(MSG_BAD_ARGS);
            return 1;
        }
        return set_mode((unsigned)mode);
    }
    if (has_i || other) {
        puts(MSG_BAD_ARGS);
        return 1;
    }
    return summary();
}
