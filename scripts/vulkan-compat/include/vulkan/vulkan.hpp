// gguf-mtp: compatibility shim for Vulkan headers older than 1.3.272.
//
// llama.cpp's ggml-vulkan (as vendored by llama-cpp-python 0.3.36) chains a
// vk::LayerSettingsCreateInfoEXT into vk::InstanceCreateInfo. VK_EXT_layer_settings
// first appeared in Vulkan-Headers 1.3.272, so distributions with older headers
// (Debian 12: libvulkan-dev 1.3.239) fail to compile ggml-vulkan.cpp.
//
// This directory is put first on the C++ include path (scripts/setup.sh does it,
// -DCMAKE_CXX_FLAGS=-I<this>/include). The file forwards to the real
// <vulkan/vulkan.hpp> and, only when that header lacks VK_EXT_layer_settings,
// adds the C types from the Vulkan registry and the few Vulkan-Hpp wrappers ggml
// uses, layout-compatible with the C structs. With headers >= 1.3.272 it is a
// plain pass-through. llama.cpp's sources are not modified.
//
// At run time nothing changes: ggml only enables the extension when the Khronos
// validation layer is present; otherwise the struct is an ignored pNext entry,
// exactly as with new headers and an old loader.
#pragma once
#if defined(__GNUC__)
#pragma GCC system_header  // silences -Wpedantic about #include_next
#endif
#include_next <vulkan/vulkan.hpp>

#if VK_HEADER_VERSION < 272 && !defined(VK_EXT_layer_settings)

#include <cstddef>
#include <cstdint>

// ---- C API (vulkan_core.h of 1.3.272+, VK_EXT_layer_settings, extension 497) ----
#define VK_EXT_layer_settings 1
#define VK_EXT_LAYER_SETTINGS_SPEC_VERSION 2
#define VK_EXT_LAYER_SETTINGS_EXTENSION_NAME "VK_EXT_layer_settings"
#define VK_STRUCTURE_TYPE_LAYER_SETTINGS_CREATE_INFO_EXT ((VkStructureType)1000496000)
#define GGUF_MTP_VULKAN_LAYER_SETTINGS_COMPAT 1

typedef enum VkLayerSettingTypeEXT {
    VK_LAYER_SETTING_TYPE_BOOL32_EXT = 0,
    VK_LAYER_SETTING_TYPE_INT32_EXT = 1,
    VK_LAYER_SETTING_TYPE_INT64_EXT = 2,
    VK_LAYER_SETTING_TYPE_UINT32_EXT = 3,
    VK_LAYER_SETTING_TYPE_UINT64_EXT = 4,
    VK_LAYER_SETTING_TYPE_FLOAT32_EXT = 5,
    VK_LAYER_SETTING_TYPE_FLOAT64_EXT = 6,
    VK_LAYER_SETTING_TYPE_STRING_EXT = 7,
    VK_LAYER_SETTING_TYPE_MAX_ENUM_EXT = 0x7FFFFFFF
} VkLayerSettingTypeEXT;

typedef struct VkLayerSettingEXT {
    const char*              pLayerName;
    const char*              pSettingName;
    VkLayerSettingTypeEXT    type;
    uint32_t                 valueCount;
    const void*              pValues;
} VkLayerSettingEXT;

typedef struct VkLayerSettingsCreateInfoEXT {
    VkStructureType             sType;
    const void*                 pNext;
    uint32_t                    settingCount;
    const VkLayerSettingEXT*    pSettings;
} VkLayerSettingsCreateInfoEXT;

// ---- Vulkan-Hpp wrappers (the subset ggml-vulkan uses) ----
namespace VULKAN_HPP_NAMESPACE {

enum class LayerSettingTypeEXT {
    eBool32  = VK_LAYER_SETTING_TYPE_BOOL32_EXT,
    eInt32   = VK_LAYER_SETTING_TYPE_INT32_EXT,
    eInt64   = VK_LAYER_SETTING_TYPE_INT64_EXT,
    eUint32  = VK_LAYER_SETTING_TYPE_UINT32_EXT,
    eUint64  = VK_LAYER_SETTING_TYPE_UINT64_EXT,
    eFloat32 = VK_LAYER_SETTING_TYPE_FLOAT32_EXT,
    eFloat64 = VK_LAYER_SETTING_TYPE_FLOAT64_EXT,
    eString  = VK_LAYER_SETTING_TYPE_STRING_EXT
};

struct LayerSettingEXT {
    using NativeType = VkLayerSettingEXT;

    VULKAN_HPP_CONSTEXPR LayerSettingEXT(const char* pLayerName_ = {}, const char* pSettingName_ = {},
                                         LayerSettingTypeEXT type_ = LayerSettingTypeEXT::eBool32,
                                         uint32_t valueCount_ = {}, const void* pValues_ = {}) VULKAN_HPP_NOEXCEPT
        : pLayerName(pLayerName_), pSettingName(pSettingName_), type(type_),
          valueCount(valueCount_), pValues(pValues_) {}

    LayerSettingEXT(VkLayerSettingEXT const& rhs) VULKAN_HPP_NOEXCEPT
        : LayerSettingEXT(*reinterpret_cast<LayerSettingEXT const*>(&rhs)) {}

    operator VkLayerSettingEXT const&() const VULKAN_HPP_NOEXCEPT {
        return *reinterpret_cast<const VkLayerSettingEXT*>(this);
    }
    operator VkLayerSettingEXT&() VULKAN_HPP_NOEXCEPT {
        return *reinterpret_cast<VkLayerSettingEXT*>(this);
    }

    const char*         pLayerName   = {};
    const char*         pSettingName = {};
    LayerSettingTypeEXT type         = LayerSettingTypeEXT::eBool32;
    uint32_t            valueCount   = {};
    const void*         pValues      = {};
};

struct LayerSettingsCreateInfoEXT {
    using NativeType = VkLayerSettingsCreateInfoEXT;
    static const bool allowDuplicate = true;
    static VULKAN_HPP_CONST_OR_CONSTEXPR StructureType structureType =
        static_cast<StructureType>(VK_STRUCTURE_TYPE_LAYER_SETTINGS_CREATE_INFO_EXT);

    VULKAN_HPP_CONSTEXPR LayerSettingsCreateInfoEXT(uint32_t settingCount_ = {},
                                                    const LayerSettingEXT* pSettings_ = {},
                                                    const void* pNext_ = nullptr) VULKAN_HPP_NOEXCEPT
        : pNext(pNext_), settingCount(settingCount_), pSettings(pSettings_) {}

#if !defined(VULKAN_HPP_DISABLE_ENHANCED_MODE)
    LayerSettingsCreateInfoEXT(ArrayProxyNoTemporaries<const LayerSettingEXT> const& settings_,
                               const void* pNext_ = nullptr)
        : pNext(pNext_), settingCount(static_cast<uint32_t>(settings_.size())), pSettings(settings_.data()) {}
#endif

    LayerSettingsCreateInfoEXT(VkLayerSettingsCreateInfoEXT const& rhs) VULKAN_HPP_NOEXCEPT
        : LayerSettingsCreateInfoEXT(*reinterpret_cast<LayerSettingsCreateInfoEXT const*>(&rhs)) {}

    operator VkLayerSettingsCreateInfoEXT const&() const VULKAN_HPP_NOEXCEPT {
        return *reinterpret_cast<const VkLayerSettingsCreateInfoEXT*>(this);
    }
    operator VkLayerSettingsCreateInfoEXT&() VULKAN_HPP_NOEXCEPT {
        return *reinterpret_cast<VkLayerSettingsCreateInfoEXT*>(this);
    }

    StructureType          sType        = structureType;
    const void*            pNext        = {};
    uint32_t               settingCount = {};
    const LayerSettingEXT* pSettings    = {};
};

template <>
struct StructExtends<LayerSettingsCreateInfoEXT, InstanceCreateInfo> {
    enum { value = true };
};

static_assert(sizeof(LayerSettingEXT) == sizeof(VkLayerSettingEXT), "LayerSettingEXT layout");
static_assert(sizeof(LayerSettingsCreateInfoEXT) == sizeof(VkLayerSettingsCreateInfoEXT),
              "LayerSettingsCreateInfoEXT layout");
static_assert(offsetof(LayerSettingEXT, pValues) == offsetof(VkLayerSettingEXT, pValues), "LayerSettingEXT layout");
static_assert(offsetof(LayerSettingsCreateInfoEXT, pSettings) == offsetof(VkLayerSettingsCreateInfoEXT, pSettings),
              "LayerSettingsCreateInfoEXT layout");

}  // namespace VULKAN_HPP_NAMESPACE

#endif  // VK_HEADER_VERSION < 272
