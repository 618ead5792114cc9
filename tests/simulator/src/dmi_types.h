/* The vendor's virtual-device ("vdev", logical slice) library libhydmi.so: status codes, the
 * device-info layout and the exported calls (docs/dev/hardware.md, "Logical slices").
 * Numbers, the struct layout and the call signatures are facts; the behaviour notes below
 * marked "assumption" are the simulator's choices where no source says (listed in that section).
 *
 * Behaviour modelled by src/dmi_virtual_api.c:
 *  - A node has cards 0..N-1 (dmiGetDeviceCount); each card can carry at most 4 live vdevs
 *    (dmiGetMaxVDeviceCount answers the per-card limit, 4).
 *  - vdev ids are node-global integers in [0, cards*4); a create takes the lowest free ids
 *    (assumption). dmiCreateVDevices does not return them: read them back with
 *    dmiGetVDeviceInfo.
 *  - Create is all-or-nothing: cus >= 1 and mem_mib >= 1 for every entry (else
 *    INVALID_ARGUMENTS); more than 4 live vdevs on the card, or more CUs / memory than the card
 *    has left, is OUT_OF_RESOURCES and creates nothing. Each vdev gets the lowest free CUs of its
 *    card (disjoint masks, 128 bits as two 64-bit words); memory is a cap, the caps of one card
 *    sum to at most the card's memory.
 *  - Refused (NOT_SUPPORTED) while the partition ("MIG") mode is on or pending on, or on a
 *    driver installed without virtualization. Conversely the mode cannot be switched on while a
 *    vdev exists (assumption, enforced by libhydmi_mig.so.1's nvmlSetSystemMigMode).
 *  - Each vdev has a driver conf file /etc/vdev/vdev<N>.conf (written on create and update,
 *    removed on destroy). While any process holds it open the vdev is in use: destroy and update
 *    answer DEVICE_BUSY (a per-card destroy then destroys nothing).
 *  - usage_mem_size and container_id are always 0 (assumption: no usage is modelled, and
 *    nothing in the simulator binds a vdev to a container id).
 *  - HYDMI_SIM_ROOT unset or not a node, or ROOT/dev/mkfd not openable: OPEN_MKFD_FAILED
 *    (assumption: the library reaches the driver through /dev/mkfd, and there is no init call a
 *    caller could make to cure NOT_INITIALIZED). */
#ifndef DMI_TYPES_H
#define DMI_TYPES_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    DMI_STATUS_SUCCESS = 0,
    DMI_STATUS_ERROR = 1,
    DMI_STATUS_NO_MEMORY = 2,
    DMI_STATUS_OPEN_MKFD_FAILED = 3,
    DMI_STATUS_MKFD_ALREADY_OPENED = 4,
    DMI_STATUS_SYS_NODE_NOT_EXIST = 5,
    DMI_STATUS_NOT_SUPPORTED = 6,
    DMI_STATUS_MKFD_NOT_OPENED = 7,
    DMI_STATUS_CREATE_VDEV_FAILED = 8,
    DMI_STATUS_DESTROY_VDEV_FAILED = 9,
    DMI_STATUS_INVALID_ARGUMENTS = 10,
    DMI_STATUS_OUT_OF_RESOURCES = 11,
    DMI_STATUS_QUERY_VDEV_INFO_FAILED = 12,
    DMI_STATUS_ERROR_NOT_INITIALIZED = 13,
    DMI_STATUS_DEVICE_NOT_SUPPORT = 14,
    DMI_STATUS_VDEV_NOT_EXIST = 15,
    DMI_STATUS_INIT_DEVICE_FAILED = 16,
    DMI_STATUS_DEVICE_BUSY = 17,
    DMI_STATUS_FILE_ERROR = 18,
    DMI_STATUS_PERMISSION = 19,
} dmiStatus;

/* A physical card (dmiGetDeviceInfo) or a vdev (dmiGetVDeviceInfo). Memory sizes in bytes. */
typedef struct {
    char name[256];
    int compute_unit_count;
    size_t global_mem_size;
    size_t usage_mem_size;   /* always 0 in the simulator */
    uint64_t container_id;   /* always 0 in the simulator */
    int device_id;           /* card: its index; vdev: the index of its card */
} dmiDeviceInfo;

#define DMI_MAX_VDEVS_PER_CARD 4

dmiStatus dmiGetDeviceCount(int *count);
dmiStatus dmiGetDeviceInfo(int device_id, dmiDeviceInfo *info);
dmiStatus dmiGetMaxVDeviceCount(int *count);
dmiStatus dmiGetVDeviceCount(int *count);
dmiStatus dmiGetDeviceRemainingInfo(int device_id, size_t *cus, size_t *mem_bytes);
dmiStatus dmiGetVDeviceInfo(int vdev_id, dmiDeviceInfo *info);
dmiStatus dmiCreateVDevices(int device_id, int count, int *cus, int *mem_mib);
dmiStatus dmiDestroyVDevices(int device_id);
dmiStatus dmiDestroySingleVDevice(int vdev_id);
dmiStatus dmiUpdateSingleVDevice(int vdev_id, int cus, int mem_mib);
dmiStatus dmiGetStatusString(dmiStatus status, const char **text);

#endif
