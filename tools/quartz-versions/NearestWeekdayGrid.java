import org.quartz.CronExpression;
import java.util.*;
public class NearestWeekdayGrid {
    public static void main(String[] a) throws Exception {
        String[] zones = {"UTC", "America/New_York"};
        java.text.SimpleDateFormat f = new java.text.SimpleDateFormat("yyyy-MM-dd'T'HH:mm:ss'Z'");
        f.setTimeZone(TimeZone.getTimeZone("UTC"));
        List<String> exprs = new ArrayList<>();
        for (int n = 1; n <= 31; n++) exprs.add("0 0 12 " + n + "W * ?");
        exprs.add("0 0 12 LW * ?");
        long start = 1767225600000L; // 2026-01-01
        for (String z : zones) for (String e : exprs) {
            CronExpression c = new CronExpression(e);
            c.setTimeZone(TimeZone.getTimeZone(z));
            for (long t = start; t < start + 2L * 366 * 86400000L; t += 6L * 3600000L) {
                String out;
                try { Date d = c.getNextValidTimeAfter(new Date(t)); out = d == null ? "NONE" : f.format(d); }
                catch (Exception ex) { out = "EXC " + ex.getClass().getSimpleName(); }
                System.out.println(e + "\t" + z + "\t" + t + "\t" + out);
            }
        }
    }
}
