/* dcu-probe: what a workload inside a container sees, following the vendor runtime's rules.
 *
 * The driver ("kernel") state comes from HYDMI_SIM_KERNEL_FD (a ROOT/.sim directory fd that
 * minirun passes through the chroot) or HYDMI_SIM_ROOT/.sim. Everything else comes from the
 * probe's own filesystem view: /dev/kfd, /dev/mkfd, /dev/dri/{card,renderD}N, /opt/hyhal and
 * /etc/dmi_mig_config/ci by absolute path. HYDMI_PROBE_VIEW=DIR prefixes those paths (tests that
 * cannot use minirun); HYDMI_PROBE_DEV, HYDMI_PROBE_REGISTRY and HYDMI_PROBE_HYHAL replace /dev,
 * /etc/dmi_mig_config and /opt/hyhal one by one.
 *
 * Output (stdout), one line per visible device, then exit 0:
 *   device <n> kind=card pci=<pci> cu_count=<cus> memory_mib=<mib>
 *   device <n> kind=partition pci=<pci> cu_count=<cus> memory_mib=<mib> mig_uuid=<uuid>
 *              gpu_instance_id=<g> compute_instance_id=<c>          (one line)
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
    char lib[PATH_MAX];
    view_path("/opt/hyhal/lib/libhydmi.so", lib, sizeof(lib));
    if (access(lib, R_OK) != 0) {
        puts("open hydmilib:libhydmi.so error"); /* measured runtime message */
    } else if (open_node("/dev/kfd") == 0 && open_node("/dev/mkfd") == 0) {
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
