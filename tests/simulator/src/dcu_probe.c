/* dcu-probe: what a workload inside a container sees, following the vendor runtime's rules.
 *
 * The driver ("kernel") state comes from HYDMI_SIM_KERNEL_FD (a ROOT/.sim directory fd that
 * minirun passes through the chroot) or HYDMI_SIM_ROOT/.sim. Everything else comes from the
 * probe's own filesystem view: /dev/kfd, /dev/mkfd, /dev/dri/{card,renderD}N, /opt/hyhal and
 * /etc/dmi_mig_config/ci and /etc/vdev/docker by absolute path. HYDMI_PROBE_VIEW=DIR prefixes those
 * paths (tests that cannot use minirun); HYDMI_PROBE_DEV, HYDMI_PROBE_REGISTRY, HYDMI_PROBE_HYHAL
 * and HYDMI_PROBE_VDEV replace /dev, /etc/dmi_mig_config, /opt/hyhal and /etc/vdev one by one.
 *
 * A process given the directory /etc/vdev/docker is a virtual-device ("vdev") workload: it sees
 * the slice of the first `vdev<N>.conf` there whose `vdev_id` is N and whose text is what the
 * driver wrote for live vdev N, or nothing (docs/dev/hardware.md, "Logical slices").
 *
 * Output (stdout), one line per visible device, then exit 0:
 *   device <n> kind=card pci=<pci> cu_count=<cus> memory_mib=<mib>
 *   device <n> kind=partition pci=<pci> cu_count=<cus> memory_mib=<mib> mig_uuid=<uuid>
 *              gpu_instance_id=<g> compute_instance_id=<c>          (one line)
 *   device <n> kind=vdev pci=<pci> cu_count=<cus> memory_mib=<mib> vdev_id=<N> card=<index>
 * or exactly `No HIP GPUs are available` and exit 1.
 * `--hold`: after printing, keep the device files and the conf file open until stdin closes. */
#define _GNU_SOURCE
#include "sim.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NONE "No HIP GPUs are available"

static const char *view = "";
static int held_fds[64];
static unsigned nheld;

/* Finer overrides than HYDMI_PROBE_VIEW, one per tree the runtime looks at. */
static const struct {
    const char *prefix;
    const char *env;
} overrides[] = {
    {"/dev", "HYDMI_PROBE_DEV"},
    {"/etc/dmi_mig_config", "HYDMI_PROBE_REGISTRY"},
    {"/opt/hyhal", "HYDMI_PROBE_HYHAL"},
    {"/etc/vdev", "HYDMI_PROBE_VDEV"},
};

static void view_path(const char *abs, char *out, size_t len)
{
    for (size_t i = 0; i < sizeof(overrides) / sizeof(overrides[0]); i++) {
        size_t n = strlen(overrides[i].prefix);
        const char *dir = getenv(overrides[i].env);
        if (dir && *dir && !strncmp(abs, overrides[i].prefix, n) &&
            (abs[n] == '/' || abs[n] == '\0')) {
            snprintf(out, len, "%s%s", dir, abs + n);
            return;
        }
    }
    snprintf(out, len, "%s%s", view, abs);
}

/* The runtime opens the device nodes it uses; a missing or unopenable node hides the device. */
static int open_node(const char *abs)
{
    char p[PATH_MAX];
    view_path(abs, p, sizeof(p));
    int fd = open(p, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return -1;
    if (nheld < sizeof(held_fds) / sizeof(held_fds[0]))
        held_fds[nheld++] = fd;
    else
        close(fd);
    return 0;
}

static int card_nodes(const sim_card *c)
{
    char a[64], b[64];
    snprintf(a, sizeof(a), "/dev/dri/card%u", c->drm_card);
    snprintf(b, sizeof(b), "/dev/dri/renderD%u", c->render_minor);
    return open_node(a) == 0 && open_node(b) == 0;
}

static int card_reachable(const sim_ctx *ctx, unsigned card)
{
    return !(card < 32 && (ctx->faults.unreachable & (1u << card)));
}

/* DMI_MIG_VISIBLE_DEVICE: comma list of MIG-<uuid> or `all`; a bare uuid is ignored. */
static int visible(const char *uuid)
{
    const char *env = getenv("DMI_MIG_VISIBLE_DEVICE");
    if (!env)
        return 0;
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", env);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        if (!strcmp(tok, "all"))
            return 1;
        if (!strncmp(tok, "MIG-", 4) && !strcmp(tok + 4, uuid))
            return 1;
    }
    return 0;
}

static int read_all(const char *path, char *out, size_t len, int *fd_out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t off = 0;
    ssize_t n;
    while (off < len - 1 && (n = read(fd, out + off, len - 1 - off)) > 0)
        off += (size_t)n;
    out[off] = '\0';
    *fd_out = fd;
    return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

static int probe_partitions(sim_ctx *ctx)
{
    char dir[PATH_MAX];
    view_path("/etc/dmi_mig_config/ci", dir, sizeof(dir));
    struct dirent **names;
    int n = scandir(dir, &names, NULL, by_name);
    if (n < 0)
        return 0;
    int shown = 0;
    for (int i = 0; i < n; i++) {
        const char *name = names[i]->d_name;
        unsigned card, gi_id, ci_id;
        char tail[8];
        char path[PATH_MAX + 256], body[4096], expect[4096];
        struct stat st;
        int fd = -1;
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        if (shown || sscanf(name, "dev%ugi%uci%u%7s", &card, &gi_id, &ci_id, tail) != 4 ||
            strcmp(tail, ".conf") != 0 || stat(path, &st) != 0 || !S_ISREG(st.st_mode) ||
            read_all(path, body, sizeof(body), &fd) != 0)
            continue;
        sim_ci *ci = sim_find_ci(ctx, card, gi_id, ci_id);
        sim_gi *gi = sim_find_gi(ctx, card, gi_id);
        int ok = ci && gi && card < ctx->node.ncards && card_reachable(ctx, card);
        if (ok) {
            /* A conf file that differs from what the driver wrote does not activate. */
            sim_render_ci_conf(ctx, gi, ci, expect, sizeof(expect));
            ok = !strcmp(body, expect) && visible(ci->uuid) && card_nodes(&ctx->node.cards[card]);
        }
        if (!ok) {
            close(fd);
            continue;
        }
        const sim_profile *p = sim_profile_by_id(&ctx->node, gi->profile_id);
        printf("device 0 kind=partition pci=%s cu_count=%u memory_mib=%llu mig_uuid=%s "
               "gpu_instance_id=%u compute_instance_id=%u\n",
               ctx->node.cards[card].pci, p ? p->cu_count : 0, p ? p->memory_mib : 0ULL,
               ci->uuid, gi_id, ci_id);
        if (nheld < sizeof(held_fds) / sizeof(held_fds[0]))
            held_fds[nheld++] = fd;
        else
            close(fd);
        shown = 1; /* the runtime shows at most one partition per process */
    }
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return shown;
}

/* The unsigned value of the first `key: value` line; -1 when absent or not a number. */
static int conf_uint(const char *body, const char *key, unsigned *out)
{
    size_t klen = strlen(key);
    for (const char *line = body; *line;) {
        if (!strncmp(line, key, klen) && line[klen] == ':') {
            char *end;
            const char *v = line + klen + 1;
            while (*v == ' ')
                v++;
            if (*v < '0' || *v > '9')
                return -1;
            unsigned long x = strtoul(v, &end, 10);
            if (*end != '\n' && *end != '\0')
                return -1;
            *out = (unsigned)x;
            return 0;
        }
        const char *nl = strchr(line, '\n');
        if (!nl)
            break;
        line = nl + 1;
    }
    return -1;
}

static int by_number(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return x < y ? -1 : (x > y);
}

/* A vdev workload: the conf files it was given under /etc/vdev/docker (lowest N first). */
static int probe_vdevs(sim_ctx *ctx, const char *dir)
{
    struct dirent **names;
    int n = scandir(dir, &names, NULL, by_name);
    if (n < 0)
        return 0;
    unsigned ids[256], nids = 0;
    for (int i = 0; i < n; i++) {
        unsigned id;
        char canon[64];
        if (nids < sizeof(ids) / sizeof(ids[0]) &&
            sscanf(names[i]->d_name, "vdev%u.conf", &id) == 1) {
            snprintf(canon, sizeof(canon), "vdev%u.conf", id);
            if (!strcmp(canon, names[i]->d_name))
                ids[nids++] = id;
        }
        free(names[i]);
    }
    free(names);
    qsort(ids, nids, sizeof(ids[0]), by_number);
    for (unsigned i = 0; i < nids; i++) {
        char path[PATH_MAX + 64], body[4096], expect[512];
        struct stat st;
        unsigned conf_id;
        int fd = -1;
        snprintf(path, sizeof(path), "%s/vdev%u.conf", dir, ids[i]);
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) ||
            read_all(path, body, sizeof(body), &fd) != 0)
            continue;
        /* Empty or unparseable, or naming another vdev than its file name: not a slice. */
        const sim_vdev *v = NULL;
        int ok = conf_uint(body, "vdev_id", &conf_id) == 0 && conf_id == ids[i];
        if (ok)
            v = sim_find_vdev(ctx, conf_id);
        ok = ok && v && v->card < ctx->node.ncards && card_reachable(ctx, v->card) &&
             sim_render_vdev_conf(ctx, v, expect, sizeof(expect)) == 0 && !strcmp(body, expect) &&
             card_nodes(&ctx->node.cards[v->card]);
        if (!ok) {
            close(fd);
            continue;
        }
        printf("device 0 kind=vdev pci=%s cu_count=%u memory_mib=%llu vdev_id=%u card=%u\n",
               ctx->node.cards[v->card].pci, v->cu_count, v->mem_mib, v->id, v->card);
        if (nheld < sizeof(held_fds) / sizeof(held_fds[0]))
            held_fds[nheld++] = fd;
        else
            close(fd);
        return 1; /* one slice per process (assumption, as for partitions) */
    }
    return 0;
}

static int probe_cards(sim_ctx *ctx)
{
    int shown = 0;
    for (unsigned c = 0; c < ctx->node.ncards; c++) {
        const sim_card *card = &ctx->node.cards[c];
        if (!card_reachable(ctx, c) || !card_nodes(card))
            continue;
        printf("device %d kind=card pci=%s cu_count=%u memory_mib=%llu\n", shown, card->pci,
               ctx->node.cu_count, ctx->node.memory_mib);
        shown++;
    }
    return shown;
}

int main(int argc, char **argv)
{
    int hold = argc > 1 && !strcmp(argv[1], "--hold");
    const char *v = getenv("HYDMI_PROBE_VIEW");
    if (v)
        view = v;
    int kernel_fd = -1;
    const char *kfd_env = getenv("HYDMI_SIM_KERNEL_FD");
    if (kfd_env && *kfd_env)
        kernel_fd = atoi(kfd_env);

    sim_ctx *ctx = malloc(sizeof(sim_ctx));
    if (!ctx || sim_open(ctx, 0, kernel_fd) != SIM_SUCCESS) {
        puts(NONE);
        return 1;
    }
    unsigned mode = ctx->mode;
    int shown = 0;
    char lib[PATH_MAX], vdev_dir[PATH_MAX];
    struct stat st;
    view_path("/opt/hyhal/lib/libhydmi.so", lib, sizeof(lib));
    view_path("/etc/vdev/docker", vdev_dir, sizeof(vdev_dir));
    /* The name must exist (lstat): on the host it links to build/libhydmi.so, which a container
     * does not see, and the probe never loads it. */
    if (lstat(lib, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISLNK(st.st_mode))) {
        puts("open hydmilib:libhydmi.so error"); /* measured runtime message */
    } else if (open_node("/dev/kfd") == 0 && open_node("/dev/mkfd") == 0) {
        if (stat(vdev_dir, &st) == 0 && S_ISDIR(st.st_mode))
            shown = probe_vdevs(ctx, vdev_dir);
        else
            shown = mode ? probe_partitions(ctx) : probe_cards(ctx);
    }
    sim_close(ctx);
    free(ctx);
    if (!shown) {
        puts(NONE);
        return 1;
    }
    fflush(stdout);
    if (hold) {
        char buf[256];
        while (read(STDIN_FILENO, buf, sizeof(buf)) > 0) {
        }
    }
    return 0;
}
