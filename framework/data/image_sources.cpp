#include "framework/data/image_sources.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>
#include <utility>

#include "framework/data/image_decode.h"
#include "framework/error.h"
#include "framework/io/file_util.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

std::string lower_extension(const std::string& name) {
  const size_t dot = name.find_last_of('.');
  if (dot == std::string::npos || dot == 0) return "";
  std::string ext = name.substr(dot);
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext;
}

// Walks folders, following links, but reads each real folder once: a link
// back to a folder above it (a loop) would otherwise be followed until the
// path grows too long, serving every image again at each level.
class FolderWalker {
 public:
  explicit FolderWalker(ImageWalkNotes* notes) : notes_(notes ? notes : &own_notes_) {}

  // False (with a note) when `dir` is a folder already read.
  bool first_visit(const fs::path& dir) {
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0) return true;  // reading it will report why
    if (seen_.insert({static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)}).second) return true;
    std::error_code ec;
    const fs::path real = fs::canonical(dir, ec);
    notes_->repeated_folders.push_back(dir.string() + " -> " + (ec ? std::string("?") : real.string()));
    return false;
  }

  void walk(const fs::path& dir, std::vector<ImageItem>& out) {
    std::vector<fs::path> files, dirs;
    std::error_code ec;
    fs::directory_iterator it(dir, ec);
    if (ec) fail<IoError>("cannot read folder '", dir.string(), "': ", ec.message());
    for (const fs::directory_entry& e : it) {
      std::error_code ec2;
      const std::string name = e.path().filename().string();
      if (e.is_directory(ec2)) {
        dirs.push_back(e.path());
      } else if (has_image_extension(name)) {
        files.push_back(e.path());
      } else if (e.is_regular_file(ec2)) {
        ++notes_->skipped_by_extension[lower_extension(name)];
        if (notes_->first_skipped.empty() || e.path().string() < notes_->first_skipped) {
          notes_->first_skipped = e.path().string();
        }
      }
    }
    auto by_name = [](const fs::path& a, const fs::path& b) { return a.filename().string() < b.filename().string(); };
    std::sort(files.begin(), files.end(), by_name);
    std::sort(dirs.begin(), dirs.end(), by_name);
    for (const auto& f : files) out.push_back({f.string(), -1});
    for (const auto& d : dirs) {
      if (first_visit(d)) walk(d, out);
    }
  }

 private:
  ImageWalkNotes own_notes_;
  ImageWalkNotes* notes_;
  std::set<std::pair<uint64_t, uint64_t>> seen_;
};

bool is_dir(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

std::vector<std::string> subfolders(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) fail<IoError>("cannot read folder '", dir, "': ", ec.message());
  for (const fs::directory_entry& e : it) {
    std::error_code ec2;
    if (e.is_directory(ec2)) names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

std::vector<std::string> ImageWalkNotes::lines() const {
  std::vector<std::string> out;
  int64_t skipped = 0;
  std::vector<std::pair<int64_t, std::string>> counts;
  for (const auto& [ext, n] : skipped_by_extension) {
    skipped += n;
    counts.push_back({-n, ext});
  }
  if (skipped > 0) {
    // The most frequent first, then by name, names without extension last.
    std::sort(counts.begin(), counts.end(), [](const auto& a, const auto& b) {
      if (a.first != b.first) return a.first < b.first;
      if (a.second.empty() != b.second.empty()) return b.second.empty();
      return a.second < b.second;
    });
    std::ostringstream line;
    line << "skipped " << skipped << (skipped == 1 ? " file" : " files") << " in formats strata does not read: ";
    for (size_t i = 0; i < counts.size(); ++i) {
      line << (i ? ", " : "") << -counts[i].first << " " << (counts[i].second.empty() ? "without extension"
                                                                                       : counts[i].second);
    }
    line << " (first: " << first_skipped << "; strata reads .jpg .jpeg .png .bmp .gif .tga .psd .pnm .ppm .pgm "
         << ".hdr .pic)";
    out.push_back(line.str());
  }
  if (!repeated_folders.empty()) {
    std::ostringstream line;
    line << repeated_folders.size() << (repeated_folders.size() == 1 ? " folder link leads" : " folder links lead")
         << " to a folder already read (a link loop, or a second link to one folder), not read again: ";
    const size_t shown = std::min<size_t>(repeated_folders.size(), 3);
    for (size_t i = 0; i < shown; ++i) line << (i ? ", " : "") << repeated_folders[i];
    if (shown < repeated_folders.size()) line << ", ... (" << repeated_folders.size() - shown << " more)";
    out.push_back(line.str());
  }
  return out;
}

std::vector<ImageItem> walk_images(const std::string& dir, ImageWalkNotes* notes) {
  if (!is_dir(dir)) fail<IoError>("'", dir, "' is not a folder (or cannot be read)");
  FolderWalker walker(notes);
  walker.first_visit(dir);
  std::vector<ImageItem> out;
  walker.walk(dir, out);
  return out;
}

std::vector<ImageItem> list_image_folder(const std::string& dir, std::vector<std::string>* class_names,
                                         ImageWalkNotes* notes) {
  if (!is_dir(dir)) fail<IoError>("'", dir, "' is not a folder (or cannot be read)");
  const std::vector<std::string> classes = subfolders(dir);
  if (classes.empty()) {
    fail<ConfigError>("folder '", dir, "' has no class subfolders; put each class's images in its own "
                      "subfolder (dir/cat/1.jpg, dir/dog/2.jpg) or give a list file of 'path label' lines");
  }
  FolderWalker walker(notes);
  walker.first_visit(dir);
  std::vector<ImageItem> out;
  for (size_t k = 0; k < classes.size(); ++k) {
    const std::string class_dir = join_path(dir, classes[k]);
    if (!walker.first_visit(class_dir)) continue;
    const size_t first = out.size();
    walker.walk(class_dir, out);
    for (size_t i = first; i < out.size(); ++i) out[i].label = static_cast<int32_t>(k);
  }
  if (out.empty()) {
    fail<ConfigError>("folder '", dir, "' has ", classes.size(),
                      " class subfolders but no image files in them (.jpg .jpeg .png .bmp .gif .tga .psd "
                      ".pnm .ppm .pgm .hdr .pic)");
  }
  if (class_names) *class_names = classes;
  return out;
}

std::vector<ImageItem> read_image_list(const std::string& list_path, const std::string& root_folder) {
  const std::string text = read_file_bytes(list_path);
  const std::string root = root_folder.empty() ? dirname_of(list_path) : root_folder;
  std::vector<ImageItem> out;
  std::istringstream is(text);
  std::string line;
  int line_no = 0;
  while (std::getline(is, line)) {
    ++line_no;
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    size_t start = 0;
    while (start < line.size() && std::isspace(static_cast<unsigned char>(line[start]))) ++start;
    line = line.substr(start);
    if (line.empty() || line[0] == '#') continue;
    ImageItem item;
    item.path = line;
    const size_t sep = line.find_last_of(" \t");
    if (sep != std::string::npos) {
      const std::string last = line.substr(sep + 1);
      char* end = nullptr;
      errno = 0;
      const long v = std::strtol(last.c_str(), &end, 10);
      if (end && *end == '\0' && !last.empty() && errno == 0) {
        if (v < 0 || v > 2147483647L) {
          fail<ConfigError>(list_path, ":", line_no, ": label ", last, " must be a class index >= 0");
        }
        item.label = static_cast<int32_t>(v);
        item.path = line.substr(0, sep);
        while (!item.path.empty() && std::isspace(static_cast<unsigned char>(item.path.back()))) item.path.pop_back();
      }
    }
    if (item.path.empty()) fail<ConfigError>(list_path, ":", line_no, ": expected 'path label', found '", line, "'");
    item.path = join_path(root, item.path);
    out.push_back(std::move(item));
  }
  if (out.empty()) fail<ConfigError>("list file '", list_path, "' names no images; write one 'path label' per line");
  return out;
}

std::vector<ImageItem> read_image_source(const std::string& source, const std::string& root_folder,
                                         ImageWalkNotes* notes) {
  if (is_dir(source)) {
    if (!subfolders(source).empty()) return list_image_folder(source, nullptr, notes);
    std::vector<ImageItem> items = walk_images(source, notes);
    if (items.empty()) fail<ConfigError>("folder '", source, "' holds no image files");
    return items;
  }
  if (!file_exists(source)) fail<IoError>("image source '", source, "' does not exist");
  return read_image_list(source, root_folder);
}

}  // namespace strata
