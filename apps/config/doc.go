// Package config loads the settings of the apps from the environment and an
// optional YAML file (CUBE_TEMPLATE_CENTER_CONFIG_PATH). Every setting has one
// CUBE_TEMPLATE_CENTER_* (or shared CUBE_*) name; pre-rename spellings still
// work as fallbacks and leave a warning in Config.Warnings. When both the new
// and the legacy name are set, the new one wins. Environment beats the file.
package config
