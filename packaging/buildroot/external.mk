include $(sort $(wildcard $(BR2_EXTERNAL_PODVISOR_PATH)/package/*/*.mk))
