/*
 * device.c - devices: count, names, identity, memory size and attributes.
 *
 * MEMHOOK_SIM_DEVICES identical H200-like devices (see device_attributes.c),
 * each with MEMHOOK_SIM_DEVICE_MEMORY bytes.  Every device can access every
 * other one as a peer (as on an NVLink-connected H200 board).
 */
#include <stdio.h>
#include <string.h>

#include "sim_api.h"
#include "sim_control.h"

#define SIM_DEVICE_NAME "NVIDIA H200 (memhook simulator)"

static CUresult check_device(CUdevice dev)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    return sim_device_valid(dev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

static void copy_string(char *dst, int len, const char *src)
{
    size_t n = strlen(src);
    if (n >= (size_t)len)
        n = (size_t)len - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

SIM_API CUresult cuDriverGetVersion(int *driverVersion)
{
    if (driverVersion == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = SIM_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_device_valid(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetCount(int *count)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (count == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *count = sim_cfg()->device_count;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    CUresult rc = check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (name == NULL || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    copy_string(name, len, SIM_DEVICE_NAME);
    return CUDA_SUCCESS;
}

/* A stable, per-device UUID: a fixed prefix, then the ordinal. */
static CUresult get_uuid(CUuuid *uuid, CUdevice dev)
{
    CUresult rc = check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (uuid == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    static const unsigned char prefix[12] = {
        0x6d, 0x68, 0x6f, 0x6b, 0x2d, 0x53, 0x49, 0x4d, 0x48, 0x32, 0x30, 0x30,
    };  /* "mhok-SIMH200" */
    memcpy(uuid->bytes, prefix, sizeof prefix);
    uuid->bytes[12] = 0;
    uuid->bytes[13] = 0;
    uuid->bytes[14] = 0;
    uuid->bytes[15] = (char)dev;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) { return get_uuid(uuid, dev); }
SIM_API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) { return get_uuid(uuid, dev); }

/* The 32-bit spelling cannot express more than 4 GiB - 1: it reports
 * min(total, UINT_MAX), never wraps. */
SIM_API CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    CUresult rc = check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (bytes == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t total = sim_cfg()->device_memory;
    *bytes = total > 0xffffffffull ? 0xffffffffu : (unsigned int)total;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    CUresult rc = check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (bytes == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *bytes = (size_t)sim_cfg()->device_memory;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    CUresult rc = check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (pi == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    int value;
    if (!sim_device_attribute((int)attrib, dev, &value))
        return CUDA_ERROR_INVALID_VALUE;
    *pi = value;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    CUresult rc = check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (pciBusId == NULL || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    char buf[32];
    int domain = 0, bus = 0, slot = 0;
    sim_device_attribute(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, dev, &domain);
    sim_device_attribute(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev, &bus);
    sim_device_attribute(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, dev, &slot);
    snprintf(buf, sizeof buf, "%04x:%02x:%02x.0", (unsigned)domain, (unsigned)bus & 0xff,
             (unsigned)slot & 0xff);
    copy_string(pciBusId, len, buf);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    CUresult rc = check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (major == NULL || minor == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    sim_device_attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev, major);
    sim_device_attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev, minor);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
    CUresult rc = check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!sim_device_valid(peerDev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (canAccessPeer == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *canAccessPeer = dev != peerDev;
    return CUDA_SUCCESS;
}
