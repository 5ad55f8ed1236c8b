/* device_client.c: an HTP device client, compiled against whichever QNN headers -I points at
 * (QNN 2.43 or 2.50 layout of QnnHtpDevice_CustomConfig_t), run against any HTP backend.
 *
 * It creates devices with SOC / ARCH / SIGNEDPD custom configs and prints what deviceGetInfo
 * and deviceGetPlatformInfo report, one line per case:
 *   layout size=<sizeof custom config> align=<alignof> core=<major>.<minor>
 *   <case> create=<code> info=<code> soc=<n> arch=<n> vtcm=<n> devices=<n> platform=<code> psoc=<n> parch=<n>
 * Each custom config lives on the stack and is filled with 0xA5 bytes before its fields are set,
 * as an uninitialised local would be (the HTP documentation's examples do exactly that).
 * Usage: device_client <backend.so>; exit status 0 unless the library cannot be used at all.
 */
#define _POSIX_C_SOURCE 200809L

#include <dlfcn.h>
#include <stdalign.h>
#include <stdio.h>
#include <string.h>

#include "QnnInterface.h"
#include "HTP/QnnHtpDevice.h"

static QNN_INTERFACE_VER_TYPE g_qnn;

static void fill(QnnHtpDevice_CustomConfig_t *c) { memset(c, 0xA5, sizeof *c); }

static void describe(const QnnDevice_PlatformInfo_t *info, unsigned *soc, unsigned *arch,
                     unsigned long *vtcm, unsigned *devices) {
  *devices = info->v1.numHwDevices;
  const QnnHtpDevice_DeviceInfoExtension_t *ext =
      (const QnnHtpDevice_DeviceInfoExtension_t *)info->v1.hwDevices[0].v1.deviceInfoExtension;
  *soc = ext->onChipDevice.socModel;
  *arch = (unsigned)ext->onChipDevice.arch;
  *vtcm = (unsigned long)ext->onChipDevice.vtcmSize;
}

/* Creates a device with `configs` (then applies `later` with deviceSetConfig when given), prints
 * the case line, frees the device. */
static void run_case(const char *name, const QnnDevice_Config_t **configs, const QnnDevice_Config_t **later) {
  Qnn_DeviceHandle_t dev = NULL;
  Qnn_ErrorHandle_t create = g_qnn.deviceCreate(NULL, configs, &dev);
  if (create == QNN_SUCCESS && later) create = g_qnn.deviceSetConfig(dev, later);
  Qnn_ErrorHandle_t info_code = 1, platform_code = 1;
  unsigned soc = 0, arch = 0, devices = 0, psoc = 0, parch = 0, pdevices = 0;
  unsigned long vtcm = 0, pvtcm = 0;
  if (create == QNN_SUCCESS) {
    const QnnDevice_PlatformInfo_t *info = NULL;
    info_code = g_qnn.deviceGetInfo(dev, &info);
    if (info_code == QNN_SUCCESS) {
      describe(info, &soc, &arch, &vtcm, &devices);
      g_qnn.deviceFreePlatformInfo(NULL, info);
    }
    const QnnDevice_PlatformInfo_t *platform = NULL;
    platform_code = g_qnn.deviceGetPlatformInfo(NULL, &platform);
    if (platform_code == QNN_SUCCESS) {
      describe(platform, &psoc, &parch, &pvtcm, &pdevices);
      g_qnn.deviceFreePlatformInfo(NULL, platform);
    }
    g_qnn.deviceFree(dev);
  }
  printf("%s create=%llu info=%llu soc=%u arch=%u vtcm=%lu devices=%u platform=%llu psoc=%u parch=%u\n", name,
         (unsigned long long)create, (unsigned long long)info_code, soc, arch, vtcm, devices,
         (unsigned long long)platform_code, psoc, parch);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s <backend.so>\n", argv[0]);
    return 2;
  }
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  typedef Qnn_ErrorHandle_t (*GetProvidersFn)(const QnnInterface_t ***, uint32_t *);
  GetProvidersFn get_providers;
  *(void **)&get_providers = dlsym(lib, "QnnInterface_getProviders");
  const QnnInterface_t **providers = NULL;
  uint32_t n = 0;
  if (!get_providers || get_providers(&providers, &n) != QNN_SUCCESS) {
    fprintf(stderr, "QnnInterface_getProviders failed\n");
    return 2;
  }
  int found = 0;
  for (uint32_t i = 0; i < n && !found; ++i) {
    const Qnn_Version_t *core = &providers[i]->apiVersion.coreApiVersion;
    if (core->major == QNN_API_VERSION_MAJOR && core->minor >= QNN_API_VERSION_MINOR) {
      g_qnn = providers[i]->QNN_INTERFACE_VER_NAME;
      found = 1;
    }
  }
  if (!found) {
    fprintf(stderr, "no provider with core API %d.>=%d\n", QNN_API_VERSION_MAJOR, QNN_API_VERSION_MINOR);
    return 2;
  }
  printf("layout size=%zu align=%zu core=%d.%d\n", sizeof(QnnHtpDevice_CustomConfig_t),
         alignof(QnnHtpDevice_CustomConfig_t), QNN_API_VERSION_MAJOR, QNN_API_VERSION_MINOR);

  QnnHtpDevice_CustomConfig_t soc, soc2, arch, signedpd;
  fill(&soc), fill(&soc2), fill(&arch), fill(&signedpd);
  soc.option = QNN_HTP_DEVICE_CONFIG_OPTION_SOC;
  soc.socModel = QNN_SOC_MODEL_SM8550;
  soc2.option = QNN_HTP_DEVICE_CONFIG_OPTION_SOC;
  soc2.socModel = QNN_SOC_MODEL_SM8650;
  arch.option = QNN_HTP_DEVICE_CONFIG_OPTION_ARCH;
  arch.arch.arch = QNN_HTP_DEVICE_ARCH_V75;
  arch.arch.deviceId = 0;
  signedpd.option = QNN_HTP_DEVICE_CONFIG_OPTION_SIGNEDPD;
  signedpd.useSignedProcessDomain.useSignedProcessDomain = true;
  signedpd.useSignedProcessDomain.deviceId = 0;

  QnnDevice_Config_t c_soc = {QNN_DEVICE_CONFIG_OPTION_CUSTOM, {&soc}};
  QnnDevice_Config_t c_soc2 = {QNN_DEVICE_CONFIG_OPTION_CUSTOM, {&soc2}};
  QnnDevice_Config_t c_arch = {QNN_DEVICE_CONFIG_OPTION_CUSTOM, {&arch}};
  QnnDevice_Config_t c_signed = {QNN_DEVICE_CONFIG_OPTION_CUSTOM, {&signedpd}};

  const QnnDevice_Config_t *l_soc[] = {&c_soc, NULL};
  const QnnDevice_Config_t *l_arch[] = {&c_arch, NULL};
  const QnnDevice_Config_t *l_signed[] = {&c_signed, NULL};
  const QnnDevice_Config_t *l_all[] = {&c_signed, &c_soc2, &c_arch, NULL};
  const QnnDevice_Config_t *l_soc2[] = {&c_soc2, NULL};

  run_case("soc", l_soc, NULL);
  run_case("arch", l_arch, NULL);
  run_case("signedpd", l_signed, NULL);
  run_case("signedpd+soc+arch", l_all, NULL);
  run_case("setconfig-soc", NULL, l_soc2);
  dlclose(lib);
  return 0;
}
