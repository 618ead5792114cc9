/* The vendor library's struct layouts (docs/dev/hardware.md): NVML names, Hygon layouts. */
#ifndef HYDMI_TYPES_H
#define HYDMI_TYPES_H

typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;
typedef void *nvmlGpuInstance_t;
typedef void *nvmlComputeInstance_t;

typedef struct {
    unsigned int id;
    unsigned int gi_count_max;
    unsigned int cu_count;
    unsigned int gpu_slice_count;
    unsigned long long memory_size_MB; /* really MiB */
    char name[256];
} hydmiGpuInstanceProfileInfo_t;

typedef struct {
    unsigned int id;
    unsigned int ci_count_max;
    unsigned int cu_count;
    unsigned int gpu_slice_count;
    char name[256];
} hydmiComputeInstanceProfileInfo_t;

typedef struct {
    unsigned int start;
    unsigned int size;
} hydmiGpuInstancePlacement_t;

typedef struct {
    nvmlDevice_t device;
    unsigned int id;
    unsigned int profile_id;
    hydmiGpuInstancePlacement_t placement;
} hydmiGpuInstanceInfo_t;

typedef struct {
    nvmlDevice_t device;
    nvmlGpuInstance_t gpu_instance;
    unsigned int id;
    unsigned int profile_id;
    hydmiGpuInstancePlacement_t placement;
} hydmiComputeInstanceInfo_t;

typedef struct {
    unsigned int index;
    unsigned int cu_count;
    unsigned long long memory_size_MB;
    char uuid[256];
    char name[256];
    unsigned int gpu_instance_slice_count;
    unsigned int compute_instance_slice_count;
} hydmiDeviceAttributes_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} hydmiMemory_t;

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} hydmiUtilization_t;

typedef struct {
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int function;
    char bus_id[32];
} hydmiPciInfo_t;

#define HYDMI_MIG_DISABLE 0
#define HYDMI_MIG_ENABLE 1
#define HYDMI_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED 0

#endif
