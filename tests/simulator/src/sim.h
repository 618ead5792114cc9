/* Shared internals of the simulated Hygon node: the "driver" state kept under ROOT/.sim/.
 * Used by both libraries (libhydmi_mig.so.1, libhydmi.so) and by dcu-probe; hy-smi only talks
 * to the libraries. */
#ifndef HYDMI_SIM_H
#define HYDMI_SIM_H

#include <limits.h>
#include <stddef.h>

/* NVML return codes, as measured (docs/dev/hardware.md). */
enum {
    SIM_SUCCESS = 0,
    SIM_ERROR_UNINITIALIZED = 1,
    SIM_ERROR_INVALID_ARGUMENT = 2,
    SIM_ERROR_NOT_SUPPORTED = 3,
    SIM_ERROR_NO_PERMISSION = 4,
    SIM_ERROR_NOT_FOUND = 6,
    SIM_ERROR_INSUFFICIENT_SIZE = 7,
    SIM_ERROR_DRIVER_NOT_LOADED = 9,
    SIM_ERROR_TIMEOUT = 10,
    SIM_ERROR_LIBRARY_NOT_FOUND = 12,
    SIM_ERROR_FUNCTION_NOT_FOUND = 13,
    SIM_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    SIM_ERROR_IN_USE = 19,
    SIM_ERROR_MEMORY = 20,
    SIM_ERROR_INSUFFICIENT_RESOURCES = 23,
    SIM_ERROR_UNKNOWN = 999,
};

#define SIM_MAX_CARDS 16
#define SIM_MAX_PROFILES 16
#define SIM_MAX_PLACEMENTS 32
#define SIM_MAX_GIS 512
#define SIM_MAX_FAULTS 16
#define SIM_UUID_LEN 36
/* Virtual devices (libhydmi.so, docs/dev/hardware.md "Logical slices"). */
#define SIM_VDEVS_PER_CARD 4
#define SIM_MAX_VDEVS (SIM_MAX_CARDS * SIM_VDEVS_PER_CARD)
#define SIM_VDEV_PIPES 20
#define SIM_MAX_CUS 128

typedef struct {
    unsigned id;
    unsigned slices;
    unsigned cu_count;
    unsigned gi_count_max;
    unsigned long long memory_mib;
    char name[64];
    unsigned nplacements;
    unsigned starts[SIM_MAX_PLACEMENTS];
} sim_profile;

typedef struct {
    unsigned index;
    char pci[32];
    unsigned drm_card;
    unsigned render_minor;
} sim_card;

/* Static description of the node (ROOT/.sim/node.conf, written by simnode init). */
typedef struct {
    char model[64];
    unsigned slices;
    unsigned cu_count;
    unsigned long long memory_mib;
    unsigned virtualization;
    unsigned gi_id_base;
    unsigned ncards;
    sim_card cards[SIM_MAX_CARDS];
    unsigned nprofiles;
    sim_profile profiles[SIM_MAX_PROFILES];
} sim_node;

typedef struct {
    unsigned card;
    unsigned id;
    unsigned profile_id;
    unsigned start;
    unsigned size;
    unsigned long long serial;
} sim_gi;

typedef struct {
    unsigned card;
    unsigned gi_id;
    unsigned id;
    unsigned profile_id;
    unsigned long long serial;
    char uuid[SIM_UUID_LEN + 1];
} sim_ci;

/* A live virtual device (ROOT/.sim/vdevs, driver memory like the instances). */
typedef struct {
    unsigned id;              /* node-global, 0 .. cards*4-1 */
    unsigned card;
    unsigned cu_count;
    unsigned long long mem_mib;
    unsigned pipe_id;
    unsigned long long cu_mask[2]; /* low word, high word */
} sim_vdev;

/* Live instances: driver memory, gone on reboot (ROOT/.sim/instances). */
typedef struct {
    unsigned long long next_serial;
    unsigned ngis;
    sim_gi gis[SIM_MAX_GIS];
    unsigned ncis;
    sim_ci cis[SIM_MAX_GIS];
} sim_instances;

typedef struct {
    char op[32];
    unsigned count;
    int code;
} sim_fail;

/* Injected faults (ROOT/.sim/faults, written by simnode fault). */
typedef struct {
    int driver_code;          /* every library call answers this code when non-zero */
    unsigned unreachable;     /* bit mask of cards unreachable by PCI / failing queries */
    int unreachable_code;
    unsigned nfail;
    sim_fail fail[SIM_MAX_FAULTS];
} sim_faults;

typedef struct {
    char root[PATH_MAX];      /* HYDMI_SIM_ROOT ("" when only a kernel fd is known) */
    int simfd;                /* ROOT/.sim directory */
    int lockfd;
    sim_node node;
    unsigned mode;
    sim_instances inst;
    unsigned nvdevs;
    sim_vdev vdevs[SIM_MAX_VDEVS];
    sim_faults faults;
    int faults_dirty;
} sim_ctx;

/* Opens the node named by HYDMI_SIM_ROOT (or an inherited kernel fd when kernel_fd >= 0),
 * takes the node lock (exclusive or shared) and loads all state. Returns an NVML code. */
int sim_open(sim_ctx *ctx, int exclusive, int kernel_fd);
/* Writes instances, vdevs, mode and faults back atomically. */
int sim_commit(sim_ctx *ctx);
void sim_close(sim_ctx *ctx);

/* Consumes one "fail <op>" fault; returns its code or SIM_SUCCESS. */
int sim_take_fault(sim_ctx *ctx, const char *op);

const sim_profile *sim_profile_by_id(const sim_node *node, unsigned id);
const sim_profile *sim_profile_by_width(const sim_node *node, unsigned slices);
sim_gi *sim_find_gi(sim_ctx *ctx, unsigned card, unsigned id);
sim_ci *sim_find_ci(sim_ctx *ctx, unsigned card, unsigned gi_id, unsigned id);

/* Registry (ROOT/etc/dmi_mig_config) helpers. */
void sim_registry_dir(const sim_ctx *ctx, char *out, size_t len);
void sim_ci_conf_name(unsigned card, unsigned gi, unsigned ci, char *out, size_t len);
void sim_gi_conf_name(unsigned card, unsigned gi, char *out, size_t len);
int sim_render_ci_conf(const sim_ctx *ctx, const sim_gi *gi, const sim_ci *ci, char *out,
                       size_t len);
int sim_render_gi_conf(const sim_ctx *ctx, const sim_gi *gi, char *out, size_t len);
int sim_registry_ensure(const sim_ctx *ctx);
int sim_registry_remove(const sim_ctx *ctx);
int sim_write_file(const char *path, const char *content);
int sim_mkdir_p(const char *path);
int sim_remove_tree(const char *path);
void sim_ops_log(const sim_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sim_new_uuid(char out[SIM_UUID_LEN + 1]);

/* Virtual devices: ROOT/etc/vdev/vdev<N>.conf, the driver's conf file of vdev N. */
void sim_vdev_dir(const sim_ctx *ctx, char *out, size_t len);
int sim_vdev_conf_path(const sim_ctx *ctx, unsigned id, char *out, size_t len);
int sim_render_vdev_conf(const sim_ctx *ctx, const sim_vdev *v, char *out, size_t len);
sim_vdev *sim_find_vdev(sim_ctx *ctx, unsigned id);

/* Real /proc scan: does any process have `path` open (by path string or by inode)? */
int sim_path_held(const char *path);

#endif
